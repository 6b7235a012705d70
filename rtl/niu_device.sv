// The per-device noise pipeline of the PCM family (docs/niu_datapath.md section 3).
//
// Input: the device's table entries GT, SP, MU, SN (already looked up), its three standard
// normals z1 (programming), z2 (drift exponent), z3 (read).  Output: the noisy conductance g
// (u17, Q1.16 of g_max), seven stages later.  The drift-factor table DF and read table RT are
// read here at data-dependent indices, so this module owns a pair of read ports of each.
//
//   gp = clamp(GT + rshr(SP*z1, 12), 0, G_MAX)         nu = min(|MU + rshr(SN*z2, 12)|, NU_MAX)
//   df = DF[k] + rshr((DF[k+1]-DF[k]) * f, 8)           (k, f) = (nu >> 8, nu & 255)
//   gd = rshr(gp * df, 16)                              sr = RT_interp(gp)
//   sa = rshr(gd * sr, 16)                              g  = clamp(gd + rshr(sa*z3, 12), 0, G_MAX)
module niu_device (
  input  logic               clk_i,
  input  logic               adv_i,
  // Table entries of this device (stage 0, registered by the caller).
  input  logic [16:0]        gt_i,
  input  logic [16:0]        sp_i,
  input  logic signed [17:0] mu_i,
  input  logic [16:0]        sn_i,
  input  logic signed [15:0] z1_i,
  input  logic signed [15:0] z2_i,
  input  logic signed [15:0] z3_i,
  // Table loads (broadcast to every copy).
  input  logic               df_we_i,
  input  logic               rt_we_i,
  input  logic [8:0]         table_waddr_i,
  input  logic [17:0]        table_wdata_i,
  output logic [16:0]        g_o
);

  localparam int ZFrac    = niu_constants_pkg::NIU_Z_FRAC;        // 12
  localparam int GMax     = niu_constants_pkg::NIU_G_MAX;         // 2^17 - 1
  localparam int NuMax    = niu_constants_pkg::NIU_NU_MAX;        // 2^16 - 1
  localparam int DfFrac   = niu_constants_pkg::NIU_DF_FRAC_BITS;  // 8
  localparam int DfOne    = niu_constants_pkg::NIU_DF_ONE_BITS;   // 16
  localparam int RtFrac   = niu_constants_pkg::NIU_RT_FRAC_BITS;  // 12
  localparam int RtOne    = niu_constants_pkg::NIU_RT_ONE_BITS;   // 16
  localparam int RtSeg    = niu_constants_pkg::NIU_RT_SEG_BITS;   // 4

  // ---- Stage 1: the two noise products.
  logic signed [33:0] prog_prod_q1, nu_prod_q1;
  logic [16:0]        gt_q1;
  logic signed [17:0] mu_q1;
  logic signed [15:0] z3_q1;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      prog_prod_q1 <= 34'($signed({1'b0, sp_i})) * 34'(z1_i);
      nu_prod_q1   <= 34'($signed({1'b0, sn_i})) * 34'(z2_i);
      gt_q1        <= gt_i;
      mu_q1        <= mu_i;
      z3_q1        <= z3_i;
    end
  end

  // ---- Stage 2: programmed conductance gp and drift exponent nu.
  logic signed [34:0] gp_raw, nu_raw, nu_abs;
  assign gp_raw = 35'($signed({1'b0, gt_q1})) + 35'((prog_prod_q1 + 34'sd2048) >>> ZFrac);
  assign nu_raw = 35'(mu_q1) + 35'((nu_prod_q1 + 34'sd2048) >>> ZFrac);
  assign nu_abs = (nu_raw < 0) ? -nu_raw : nu_raw;

  logic [16:0]        gp_q2;
  logic [15:0]        nu_q2;
  logic signed [15:0] z3_q2;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      gp_q2 <= (gp_raw < 0) ? '0 : (gp_raw > 35'(GMax)) ? 17'(GMax) : 17'(gp_raw);
      nu_q2 <= (nu_abs > 35'(NuMax)) ? 16'(NuMax) : 16'(nu_abs);
      z3_q2 <= z3_q1;
    end
  end

  // ---- Stage 3: table indices; DF and RT read (registered) into stage 3.
  // RT segment: o = lzc17(gp) (gp = 0 read as 1), n = gp << o, j = (16 - o)*16 + n[15:12].
  logic [16:0] gp_nonzero;
  logic [15:0] gp_normalized;  // below the leading one, which is always at bit 16
  logic [4:0]  gp_lz;
  assign gp_nonzero = (gp_q2 == '0) ? 17'd1 : gp_q2;
  always_comb begin
    gp_lz = 5'd16;
    for (int b = 0; b <= 16; b++) begin
      if (gp_nonzero[b]) gp_lz = 5'(16 - b);
    end
  end
  assign gp_normalized = 16'(gp_nonzero << gp_lz);

  logic [8:0] df_index, rt_index;
  assign df_index = 9'(nu_q2 >> DfFrac);
  assign rt_index = (9'd16 - 9'(gp_lz)) * 9'(1 << RtSeg) + 9'(gp_normalized[RtFrac +: RtSeg]);

  logic [33:0] df_knots;  // {DF[k+1], DF[k]}
  logic [35:0] rt_knots;  // {RT[j+1], RT[j]}
  niu_table #(.Entries(niu_constants_pkg::NIU_DF_ENTRIES), .Width(17), .Ports(2)) u_df (
    .clk_i,
    .we_i    (df_we_i),
    .waddr_i (table_waddr_i),
    .wdata_i (table_wdata_i[16:0]),
    .adv_i,
    .raddr_i ({df_index + 9'd1, df_index}),
    .rdata_o (df_knots)
  );
  niu_table #(.Entries(niu_constants_pkg::NIU_RT_ENTRIES), .Width(18), .Ports(2)) u_rt (
    .clk_i,
    .we_i    (rt_we_i),
    .waddr_i (table_waddr_i),
    .wdata_i (table_wdata_i),
    .adv_i,
    .raddr_i ({rt_index + 9'd1, rt_index}),
    .rdata_o (rt_knots)
  );

  logic [DfFrac-1:0]  df_frac_q3;
  logic [RtFrac-1:0]  rt_frac_q3;
  logic [16:0]        gp_q3;
  logic signed [15:0] z3_q3;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      df_frac_q3 <= nu_q2[DfFrac-1:0];
      rt_frac_q3 <= gp_normalized[RtFrac-1:0];
      gp_q3      <= gp_q2;
      z3_q3      <= z3_q2;
    end
  end

  // ---- Stage 4: interpolated drift factor df and relative read sigma sr.
  logic signed [18:0] df_slope;
  logic signed [19:0] rt_slope;
  logic signed [27:0] df_slope_frac;
  logic signed [32:0] rt_slope_frac;
  assign df_slope      = 19'($signed({1'b0, df_knots[33:17]})) - 19'($signed({1'b0, df_knots[16:0]}));
  assign rt_slope      = 20'($signed({1'b0, rt_knots[35:18]})) - 20'($signed({1'b0, rt_knots[17:0]}));
  assign df_slope_frac = 28'(df_slope) * 28'($signed({1'b0, df_frac_q3}));
  assign rt_slope_frac = 33'(rt_slope) * 33'($signed({1'b0, rt_frac_q3}));

  logic signed [19:0] df_q4;
  logic signed [20:0] sr_q4;
  logic [16:0]        gp_q4;
  logic signed [15:0] z3_q4;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      df_q4 <= 20'($signed({1'b0, df_knots[16:0]})) + 20'((df_slope_frac + 28'sd128) >>> DfFrac);
      sr_q4 <= 21'($signed({1'b0, rt_knots[17:0]})) + 21'((rt_slope_frac + 33'sd2048) >>> RtFrac);
      gp_q4 <= gp_q3;
      z3_q4 <= z3_q3;
    end
  end

  // ---- Stage 5: drifted conductance gd.
  logic signed [38:0] gd_prod;
  assign gd_prod = 39'($signed({1'b0, gp_q4})) * 39'(df_q4);

  logic signed [23:0] gd_q5;
  logic signed [20:0] sr_q5;
  logic signed [15:0] z3_q5;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      gd_q5 <= 24'((gd_prod + (39'sd1 <<< (DfOne - 1))) >>> DfOne);
      sr_q5 <= sr_q4;
      z3_q5 <= z3_q4;
    end
  end

  // ---- Stage 6: absolute read sigma sa.
  logic signed [44:0] sa_prod;
  assign sa_prod = 45'(gd_q5) * 45'(sr_q5);

  logic signed [29:0] sa_q6;
  logic signed [23:0] gd_q6;
  logic signed [15:0] z3_q6;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      sa_q6 <= 30'((sa_prod + (45'sd1 <<< (RtOne - 1))) >>> RtOne);
      gd_q6 <= gd_q5;
      z3_q6 <= z3_q5;
    end
  end

  // ---- Stage 7: read noise and the final clamp.
  logic signed [45:0] read_prod;
  logic signed [46:0] g_raw;
  assign read_prod = 46'(sa_q6) * 46'(z3_q6);
  assign g_raw     = 47'(gd_q6) + 47'((read_prod + 46'sd2048) >>> ZFrac);

  always_ff @(posedge clk_i) begin
    if (adv_i) g_o <= (g_raw < 0) ? '0 : (g_raw > 47'(GMax)) ? 17'(GMax) : 17'(g_raw);
  end

endmodule
