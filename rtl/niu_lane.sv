// One INT8 lane of the noise pipeline: a clean code in, a noisy code out, 12 stages later.
//
// docs/niu_datapath.md sections 2 and 3.  The code's magnitude a = min(|c|, 127) indexes the
// per-code tables for the *on* device; the *off* device always uses entry 0, which the caller
// passes in as registers.  The two devices are processed by identical pipelines; the draws of
// g+ and g- are routed to on/off by the sign, so the random stream positions match the spec
// (they belong to g+ and g-, not to on and off).  Back-conversion rounds on g_on - g_off.
//
// Stage map (register stage n holds the beat n cycles of adv_i after it entered):
//   1-2 code delay (Gaussians run in parallel)   3 table entries + normals ready
//   4-10 device pipelines                          11 scaled difference   12 output code
module niu_lane (
  input  logic               clk_i,
  input  logic               adv_i,
  input  logic [7:0]         code_i,      // stage 0: the clean code as it enters
  // Standard normals at stage 3, {g-, g+} for each of z1, z2, z3.
  input  logic [31:0]        z1_i,
  input  logic [31:0]        z2_i,
  input  logic [31:0]        z3_i,
  // Entry 0 of GT, SP, MU, SN: the off device's target.
  input  logic [16:0]        gt0_i,
  input  logic [16:0]        sp0_i,
  input  logic [17:0]        mu0_i,
  input  logic [16:0]        sn0_i,
  // Layer constants.
  input  logic [17:0]        back_k_i,
  input  logic [3:0]         out_bits_i,
  // Table loads (one write enable per table, shared address and data).
  input  logic               gt_we_i,
  input  logic               sp_we_i,
  input  logic               mu_we_i,
  input  logic               sn_we_i,
  input  logic               df_we_i,
  input  logic               rt_we_i,
  input  logic [8:0]         table_waddr_i,
  input  logic [17:0]        table_wdata_i,
  output logic [7:0]         code_o       // stage 12
);

  localparam int KShift = niu_constants_pkg::NIU_K_SHIFT;  // 24
  localparam int LastStage = 12;

  // ---- Stages 1-2: carry the code while the Gaussians are computed.
  logic [7:0] code_q1, code_q2;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      code_q1 <= code_i;
      code_q2 <= code_q1;
    end
  end

  logic       negative_q2;
  logic [6:0] magnitude_q2;  // a = min(|c|, 127): -128 reads as -127
  assign negative_q2  = code_q2[7];
  assign magnitude_q2 = (code_q2 == 8'h80) ? 7'd127
                      : negative_q2 ? 7'(-code_q2) : code_q2[6:0];

  // ---- Stage 3: the on device's table entries (registered reads).
  logic [16:0] gt_on, sp_on, sn_on;
  logic [17:0] mu_on;
  niu_table #(.Entries(128), .Width(17)) u_gt (
    .clk_i, .we_i(gt_we_i), .waddr_i(table_waddr_i[6:0]), .wdata_i(table_wdata_i[16:0]),
    .adv_i, .raddr_i(magnitude_q2), .rdata_o(gt_on));
  niu_table #(.Entries(128), .Width(17)) u_sp (
    .clk_i, .we_i(sp_we_i), .waddr_i(table_waddr_i[6:0]), .wdata_i(table_wdata_i[16:0]),
    .adv_i, .raddr_i(magnitude_q2), .rdata_o(sp_on));
  niu_table #(.Entries(128), .Width(18)) u_mu (
    .clk_i, .we_i(mu_we_i), .waddr_i(table_waddr_i[6:0]), .wdata_i(table_wdata_i),
    .adv_i, .raddr_i(magnitude_q2), .rdata_o(mu_on));
  niu_table #(.Entries(128), .Width(17)) u_sn (
    .clk_i, .we_i(sn_we_i), .waddr_i(table_waddr_i[6:0]), .wdata_i(table_wdata_i[16:0]),
    .adv_i, .raddr_i(magnitude_q2), .rdata_o(sn_on));

  // The sign travels beside the devices: stages 3..11.
  logic [LastStage-1:3] negative_q;
  always_ff @(posedge clk_i) begin
    if (adv_i) negative_q <= {negative_q[LastStage-2:3], negative_q2};
  end

  // g+ is on for c >= 0, g- for c < 0.
  logic on_is_minus;
  assign on_is_minus = negative_q[3];
  logic [15:0] z1_on, z2_on, z3_on, z1_off, z2_off, z3_off;
  assign z1_on  = on_is_minus ? z1_i[31:16] : z1_i[15:0];
  assign z2_on  = on_is_minus ? z2_i[31:16] : z2_i[15:0];
  assign z3_on  = on_is_minus ? z3_i[31:16] : z3_i[15:0];
  assign z1_off = on_is_minus ? z1_i[15:0] : z1_i[31:16];
  assign z2_off = on_is_minus ? z2_i[15:0] : z2_i[31:16];
  assign z3_off = on_is_minus ? z3_i[15:0] : z3_i[31:16];

  logic [16:0] g_on, g_off;
  niu_device u_on (
    .clk_i, .adv_i,
    .gt_i(gt_on), .sp_i(sp_on), .mu_i(mu_on), .sn_i(sn_on),
    .z1_i(z1_on), .z2_i(z2_on), .z3_i(z3_on),
    .df_we_i, .rt_we_i, .table_waddr_i, .table_wdata_i,
    .g_o(g_on));
  niu_device u_off (
    .clk_i, .adv_i,
    .gt_i(gt0_i), .sp_i(sp0_i), .mu_i(mu0_i), .sn_i(sn0_i),
    .z1_i(z1_off), .z2_i(z2_off), .z3_i(z3_off),
    .df_we_i, .rt_we_i, .table_waddr_i, .table_wdata_i,
    .g_o(g_off));

  // ---- Stage 11: m = rshr((g_on - g_off) * K, 24), rounded before the sign is applied.
  logic signed [17:0] diff;
  logic signed [36:0] scaled;
  assign diff   = 18'($signed({1'b0, g_on})) - 18'($signed({1'b0, g_off}));
  assign scaled = 37'(diff) * 37'($signed({1'b0, back_k_i}));

  logic signed [13:0] m_q11;
  always_ff @(posedge clk_i) begin
    if (adv_i) m_q11 <= 14'((scaled + (37'sd1 <<< (KShift - 1))) >>> KShift);
  end

  // ---- Stage 12: sign and saturation to the layer's code width B: +-(2^(B-1) - 1).
  logic signed [13:0] signed_m, code_max;
  assign signed_m = negative_q[LastStage-1] ? -m_q11 : m_q11;
  assign code_max = (14'sd1 <<< (out_bits_i - 4'd1)) - 14'sd1;

  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      code_o <= (signed_m > code_max) ? 8'(code_max)
              : (signed_m < -code_max) ? 8'(-code_max) : 8'(signed_m);
    end
  end

endmodule
