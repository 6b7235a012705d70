// One INT8 lane of the noise pipeline: a clean code and the NIU_RNG_GENS = 4 generator outputs of its stream
// in, the noisy code out NIU_PIPE_STAGES = 21 stages later (docs/niu_datapath.md sections 3, 4).
//
//   stage 1        codes and generator outputs registered (NIU_STAGES_RNG)
//   stages 2-3     the chip Gaussian pairs (address, ROM); the on device's table entries (NIU_STAGES_GAUSS)
//   stages 4-18    the on and the off device (niu_device, NIU_STAGES_DEVICE); the read Gaussian pair
//                  reads its ROM at stage 16, when the devices need it
//   stages 19-21   m = rshr((g_on - g_off) * K, 19); sign; saturation to the layer's width (NIU_STAGES_BACK)
//
// The magnitude a = min(|c|, 127) picks the on device's entry of the per-code table; the off device
// uses entry 0, which the loader keeps in registers.  The six normals belong to g+ and g- (their
// stream positions do not depend on the sign); the sign swaps each pair's ROM addresses so that
// output a of every pair is the on device's.
module niu_lane (
  input  logic                                                   clk_i,
  input  logic                                                   adv_i,
  input  logic [niu_constants_pkg::NIU_CODE_BITS-1:0]            code_i,   // stage 0
  input  logic [niu_constants_pkg::NIU_RNG_GENS*niu_constants_pkg::NIU_RNG_WORD_BITS-1:0] rand_i,  // stage 0
  // Layer constants.
  input  logic [niu_constants_pkg::NIU_LT_BITS-1:0]              lt_i,
  input  logic [niu_constants_pkg::NIU_K_BITS-1:0]               back_k_i,
  input  logic [niu_constants_pkg::NIU_OUT_BITS_FIELD-1:0]       out_bits_i,
  input  logic [niu_constants_pkg::NIU_G_BITS-1:0]               gt0_i,
  input  logic [niu_constants_pkg::NIU_SP_BITS-1:0]              sp0_i,
  input  logic [niu_constants_pkg::NIU_NU_BITS-1:0]              mu0_i,
  input  logic [niu_constants_pkg::NIU_NU_BITS-1:0]              sn0_i,
  // Table loads (broadcast by the loader).
  input  logic                                                   code_we_i,
  input  logic [niu_constants_pkg::NIU_CODE_INDEX_BITS-1:0]      code_waddr_i,
  input  logic [2*(niu_constants_pkg::NIU_G_BITS+niu_constants_pkg::NIU_NU_BITS)-1:0] code_wdata_i,  // {SN, MU, SP, GT}
  input  logic                                                   rt_we_i,
  input  logic [niu_constants_pkg::NIU_RT_ADDR_BITS-1:0]         rt_waddr_i,
  input  logic [2*niu_constants_pkg::NIU_TABLE_FIELD_BITS-1:0]   table_wdata_i,
  output logic [niu_constants_pkg::NIU_CODE_BITS-1:0]            code_o   // stage NIU_PIPE_STAGES
);

  localparam int CodeBits  = niu_constants_pkg::NIU_CODE_BITS;
  localparam int IndexBits = niu_constants_pkg::NIU_CODE_INDEX_BITS;
  localparam int WordBits  = niu_constants_pkg::NIU_RNG_WORD_BITS;
  localparam int Gens      = niu_constants_pkg::NIU_RNG_GENS;
  localparam int UChip     = niu_constants_pkg::NIU_GAUSS_CHIP_U_BITS;
  localparam int URead     = niu_constants_pkg::NIU_GAUSS_READ_U_BITS;
  localparam int ZBits     = niu_constants_pkg::NIU_Z_BITS;
  localparam int GBits     = niu_constants_pkg::NIU_G_BITS;
  localparam int SpBits    = niu_constants_pkg::NIU_SP_BITS;
  localparam int NuBits    = niu_constants_pkg::NIU_NU_BITS;
  localparam int KBits     = niu_constants_pkg::NIU_K_BITS;
  localparam int KShift    = niu_constants_pkg::NIU_K_SHIFT;
  localparam int OutField  = niu_constants_pkg::NIU_OUT_BITS_FIELD;
  localparam int Stages    = niu_constants_pkg::NIU_PIPE_STAGES;
  localparam int DevIn     = niu_constants_pkg::NIU_STAGES_RNG + niu_constants_pkg::NIU_STAGES_GAUSS;  // 3
  localparam int ReadAt    = DevIn + niu_constants_pkg::NIU_STAGES_DEVICE - 2;  // z3 enters a device at its stage 13
  localparam int ReadDelay = ReadAt - DevIn;
  localparam int ByteBits  = WordBits - UChip;     // the low byte of a chip generator output
  localparam int ProdBits  = GBits + KBits + 2;    // (g_on - g_off) * K, signed
  localparam int MBits     = ProdBits - KShift + 1;
  localparam int MHalf     = ProdBits - KShift + 1;  // prod >>> (KShift - 1)

  // ---- stage 1: codes and generator outputs.
  logic [CodeBits-1:0]      code_q1;
  logic [Gens*WordBits-1:0] rand_q1;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      code_q1 <= code_i;
      rand_q1 <= rand_i;
    end
  end

  // The six uniforms (niu_rng.hpp split_uniforms): z1+ = c0[31:8], z1- = c1[31:8],
  // z2+ = c2[31:8], z2- = {c0[7:0], c1[7:0], c2[7:0]} (24 bits); z3+ = r0[31:16], z3- = r0[15:0].
  logic [WordBits-1:0] c0, c1, c2, r0;
  assign {r0, c2, c1, c0} = rand_q1;

  // ---- stages 2-3: Gaussians; g+ is on for c >= 0, g- for c < 0, so a negative code swaps each
  // pair (z_a is the on device's normal, z_b the off device's).
  logic                    negative_q1;
  logic signed [ZBits-1:0] z1_on, z1_off, z2_on, z2_off, z3_on, z3_off;
  assign negative_q1 = code_q1[CodeBits-1];
  niu_gauss #(.UBits(UChip)) u_gauss_prog (
    .clk_i, .adv_i, .swap_i (negative_q1),
    .u_a_i (c0[WordBits-1 -: UChip]), .u_b_i (c1[WordBits-1 -: UChip]),
    .z_a_o (z1_on), .z_b_o (z1_off));
  niu_gauss #(.UBits(UChip)) u_gauss_nu (
    .clk_i, .adv_i, .swap_i (negative_q1),
    .u_a_i (c2[WordBits-1 -: UChip]), .u_b_i ({c0[ByteBits-1:0], c1[ByteBits-1:0], c2[ByteBits-1:0]}),
    .z_a_o (z2_on), .z_b_o (z2_off));
  niu_gauss #(.UBits(URead), .Delay(ReadDelay)) u_gauss_read (
    .clk_i, .adv_i, .swap_i (negative_q1),
    .u_a_i (r0[WordBits-1 -: URead]), .u_b_i (r0[URead-1:0]),
    .z_a_o (z3_on), .z_b_o (z3_off));

  // The code: stage 2 holds its sign and magnitude a = min(|c|, 127) (-128 reads as -127), which
  // addresses the per-code table; the entries arrive at stage 3 with the normals.
  logic [CodeBits-1:0] code_q2;
  always_ff @(posedge clk_i) begin
    if (adv_i) code_q2 <= code_q1;
  end

  logic                 negative_q2;
  logic [IndexBits-1:0] magnitude_q2;
  assign negative_q2  = code_q2[CodeBits-1];
  assign magnitude_q2 = (code_q2 == {1'b1, {(CodeBits-1){1'b0}}}) ? '1
                      : negative_q2 ? IndexBits'(-code_q2) : code_q2[IndexBits-1:0];

  localparam int EntryBits = GBits + SpBits + 2 * NuBits;
  logic [EntryBits-1:0] entry;  // {SN, MU, SP, GT}
  niu_table #(.Entries(niu_constants_pkg::NIU_CODE_TABLE), .Width(EntryBits), .AddrBits(IndexBits)) u_code (
    .clk_i, .we_i(code_we_i), .waddr_i(code_waddr_i), .wdata_i(code_wdata_i),
    .adv_i, .raddr_i(magnitude_q2), .rdata_o(entry));

  // The sign travels beside the devices, stages 3..Stages-1.
  logic [Stages-1:DevIn] negative_q;
  always_ff @(posedge clk_i) begin
    if (adv_i) negative_q <= {negative_q[Stages-2:DevIn], negative_q2};
  end

  // ---- stages 4-18: the devices.
  logic [GBits-1:0] g_on, g_off;
  niu_device u_on (
    .clk_i, .adv_i,
    .gt_i (entry[GBits-1:0]), .sp_i (entry[GBits +: SpBits]),
    .mu_i (entry[GBits + SpBits +: NuBits]), .sn_i (entry[GBits + SpBits + NuBits +: NuBits]),
    .z1_i (z1_on), .z2_i (z2_on), .z3_i (z3_on),
    .lt_i, .rt_we_i, .rt_waddr_i, .rt_wdata_i (table_wdata_i),
    .g_o  (g_on));
  niu_device u_off (
    .clk_i, .adv_i,
    .gt_i (gt0_i), .sp_i (sp0_i), .mu_i (mu0_i), .sn_i (sn0_i),
    .z1_i (z1_off), .z2_i (z2_off), .z3_i (z3_off),
    .lt_i, .rt_we_i, .rt_waddr_i, .rt_wdata_i (table_wdata_i),
    .g_o  (g_off));

  // ---- stage 19: (g_on - g_off) * K (the subtraction fits a DSP48E2 pre-adder).
  logic signed [GBits:0]      diff;
  logic signed [ProdBits-1:0] prod_q;
  assign diff = $signed({1'b0, g_on}) - $signed({1'b0, g_off});
  always_ff @(posedge clk_i) begin
    if (adv_i) prod_q <= ProdBits'(diff) * ProdBits'($signed({1'b0, back_k_i}));
  end

  // ---- stage 20: m = rshr(prod, 19), rounded on the on-minus-off difference, before the sign.
  logic signed [MHalf-1:0] m_half;
  logic signed [MHalf:0]   m_sum;
  assign m_half = prod_q[ProdBits-1 -: MHalf];
  assign m_sum  = {m_half[MHalf-1], m_half} + (MHalf+1)'(1);

  logic signed [MBits-1:0] m_q;
  always_ff @(posedge clk_i) begin
    if (adv_i) m_q <= MBits'(m_sum[MHalf:1]);
  end

  // ---- stage 21: sign and saturation to +-(2^(B-1) - 1).
  logic signed [MBits-1:0] signed_m, code_max;
  assign signed_m = negative_q[Stages-1] ? -m_q : m_q;
  assign code_max = (MBits'(1) <<< (out_bits_i - OutField'(1))) - MBits'(1);

  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      code_o <= (signed_m > code_max) ? CodeBits'(code_max)
              : (signed_m < -code_max) ? CodeBits'(-code_max) : CodeBits'(signed_m);
    end
  end

endmodule
