// One device of a differential pair through the PCM-family noise model (docs/niu_datapath.md
// section 3), NIU_STAGES_DEVICE = 15 stages, each moving on adv_i.
//
//   gp = clamp(GT + rshr(SP*z1, 12), 0, G_MAX)          programmed conductance (fixed per chip)
//   nu = min(|MU + rshr(SN*z2, 12)|, NU_MAX)            drift exponent (fixed per chip)
//   x  = min(rshr(nu*LT, 15), X_MAX)                    LT = log2(t_total/t0), per layer
//   g1 = rshr(gp * (E[k] - rshr(D[k]*f, 6)), 15)        2^-(x mod 1): k = x[10:6], f = x[5:0]
//   gd = rshr(g1 * 2^(15-xi), 15)                       2^-floor(x): xi = x[14:11]
//   sr = RT[j] + rshr(RD[j]*fr, 8)                      j, fr: log segment of max(gp, 1)
//   sa = min(rshr(gd*sr, 14), G_MAX)
//   g  = clamp(gd + rshr(sa*z3, 12), 0, G_MAX)          read conductance
// Every rounding uses rshr(p, s) = ((p >>> (s-1)) + 1) >>> 1, so its adder is only as wide as
// the result.  z3 (the read noise) is used at stage 14 and arrives at stage 13: the lane reads
// its Gaussian late instead of carrying it through the pipeline.  The device owns one copy of
// the layer's read table (written by the loader's broadcast); the 2^-f ROM is the generated
// 32-entry function of niu_constants_pkg.
module niu_device (
  input  logic                                                 clk_i,
  input  logic                                                 adv_i,
  // Stage 0: the device's table entries and its chip normals.
  input  logic [niu_constants_pkg::NIU_G_BITS-1:0]             gt_i,
  input  logic [niu_constants_pkg::NIU_SP_BITS-1:0]            sp_i,
  input  logic [niu_constants_pkg::NIU_NU_BITS-1:0]            mu_i,
  input  logic [niu_constants_pkg::NIU_NU_BITS-1:0]            sn_i,
  input  logic signed [niu_constants_pkg::NIU_Z_BITS-1:0]      z1_i,
  input  logic signed [niu_constants_pkg::NIU_Z_BITS-1:0]      z2_i,
  // Stage 13: the read normal.
  input  logic signed [niu_constants_pkg::NIU_Z_BITS-1:0]      z3_i,
  // Layer constant and read-table loads.
  input  logic [niu_constants_pkg::NIU_LT_BITS-1:0]            lt_i,
  input  logic                                                 rt_we_i,
  input  logic [niu_constants_pkg::NIU_RT_ADDR_BITS-1:0]       rt_waddr_i,
  input  logic [2*niu_constants_pkg::NIU_TABLE_FIELD_BITS-1:0] rt_wdata_i,
  output logic [niu_constants_pkg::NIU_G_BITS-1:0]             g_o
);

  localparam int GBits     = niu_constants_pkg::NIU_G_BITS;
  localparam int GMax      = niu_constants_pkg::NIU_G_MAX;
  localparam int SpBits    = niu_constants_pkg::NIU_SP_BITS;
  localparam int NuBits    = niu_constants_pkg::NIU_NU_BITS;
  localparam int NuFrac    = niu_constants_pkg::NIU_NU_FRAC;
  localparam int NuMax     = niu_constants_pkg::NIU_NU_MAX;
  localparam int ZBits     = niu_constants_pkg::NIU_Z_BITS;
  localparam int ZFrac     = niu_constants_pkg::NIU_Z_FRAC;
  localparam int LtBits    = niu_constants_pkg::NIU_LT_BITS;
  localparam int XBits     = niu_constants_pkg::NIU_X_BITS;
  localparam int XFrac     = niu_constants_pkg::NIU_X_FRAC;
  localparam int XMax      = niu_constants_pkg::NIU_X_MAX;
  localparam int XIntBits  = niu_constants_pkg::NIU_X_INT_BITS;
  localparam int ExpSeg    = niu_constants_pkg::NIU_EXP_SEG_BITS;
  localparam int ExpFrac   = niu_constants_pkg::NIU_EXP_FRAC_BITS;
  localparam int ExpOne    = niu_constants_pkg::NIU_EXP_ONE_BITS;
  localparam int ExpValue  = niu_constants_pkg::NIU_EXP_VALUE_BITS;
  localparam int ExpSlope  = niu_constants_pkg::NIU_EXP_SLOPE_BITS;
  localparam int RtAddr    = niu_constants_pkg::NIU_RT_ADDR_BITS;
  localparam int RtSeg     = niu_constants_pkg::NIU_RT_SEG_BITS;
  localparam int RtFrac    = niu_constants_pkg::NIU_RT_FRAC_BITS;
  localparam int RtValue   = niu_constants_pkg::NIU_RT_VALUE_BITS;
  localparam int RtSlope   = niu_constants_pkg::NIU_RT_SLOPE_BITS;
  localparam int RtOne     = niu_constants_pkg::NIU_RT_ONE_BITS;
  localparam int Field     = niu_constants_pkg::NIU_TABLE_FIELD_BITS;
  localparam int OctBits   = $clog2(GBits);
  localparam int ProdBits  = ZBits + SpBits + 1;        // a table entry times a normal, signed
  localparam int HalfBits  = ProdBits - ZFrac + 1;      // that product >>> (ZFrac - 1)
  localparam int SumBits   = HalfBits + 1;              // entry + rounded product
  localparam int PxBits    = NuBits + LtBits;           // nu * LT
  localparam int XRound    = PxBits - NuFrac + 1;       // (nu * LT) >> (NuFrac - 1)
  localparam int PgBits    = GBits + ExpValue;          // gp * 2^-f, g1 * 2^(15-xi), gd * sr
  localparam int PgRound   = PgBits - ExpOne + 1;
  localparam int SaRound   = PgBits - RtOne + 1;
  localparam int PrdBits   = RtSlope + RtFrac + 1;      // RD * fr, signed
  localparam int PrdRound  = PrdBits - RtFrac + 1;
  localparam int PeBits    = ExpSlope + ExpFrac;        // D * f
  localparam int PeRound   = PeBits - ExpFrac + 1;

  // ---- d1: the two chip-noise products.
  logic signed [ProdBits-1:0] p1_q1, p2_q1;
  logic [GBits-1:0]           gt_q1;
  logic [NuBits-1:0]          mu_q1;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      p1_q1 <= $signed({1'b0, sp_i}) * z1_i;
      p2_q1 <= $signed({1'b0, sn_i}) * z2_i;
      gt_q1 <= gt_i;
      mu_q1 <= mu_i;
    end
  end

  // ---- d2: programmed conductance gp and drift exponent nu.
  logic signed [HalfBits-1:0] p1_half, p2_half;
  logic signed [SumBits-1:0]  gp_raw, nu_raw, nu_abs;
  assign p1_half = p1_q1[ProdBits-1 -: HalfBits];
  assign p2_half = p2_q1[ProdBits-1 -: HalfBits];
  assign gp_raw  = SumBits'($signed({1'b0, gt_q1})) + SumBits'((p1_half + HalfBits'(1)) >>> 1);
  assign nu_raw  = SumBits'($signed({1'b0, mu_q1})) + SumBits'((p2_half + HalfBits'(1)) >>> 1);
  assign nu_abs  = (nu_raw < 0) ? -nu_raw : nu_raw;

  logic [GBits-1:0]  gp_q2;
  logic [NuBits-1:0] nu_q2;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      gp_q2 <= (gp_raw < 0) ? '0 : (gp_raw > SumBits'(GMax)) ? GBits'(GMax) : GBits'(gp_raw);
      nu_q2 <= (nu_abs > SumBits'(NuMax)) ? NuBits'(NuMax) : NuBits'(nu_abs);
    end
  end

  // ---- d3: nu * LT.
  logic [PxBits-1:0] px_q3;
  logic [GBits-1:0]  gp_q3;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      px_q3 <= nu_q2 * lt_i;
      gp_q3 <= gp_q2;
    end
  end

  // ---- d4: x = rshr(nu * LT, 15) in Q4.11, saturating.
  logic [XRound:0]   x_sum;
  logic [XRound-1:0] x_round;
  assign x_sum   = {1'b0, px_q3[PxBits-1 -: XRound]} + 1'b1;
  assign x_round = x_sum[XRound:1];

  logic [XBits-1:0] x_q4;
  logic [GBits-1:0] gp_q4;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      x_q4  <= (x_round > XRound'(XMax)) ? XBits'(XMax) : XBits'(x_round);
      gp_q4 <= gp_q3;
    end
  end

  // ---- d5: the 2^-f ROM at k = x[10:6].
  logic [ExpValue-1:0] e_q5;
  logic [ExpSlope-1:0] d_q5;
  logic [ExpFrac-1:0]  f_q5;
  logic [XIntBits-1:0] xi_q5;
  logic [GBits-1:0]    gp_q5;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      e_q5  <= niu_constants_pkg::niu_exp_value(x_q4[XFrac-1 -: ExpSeg]);
      d_q5  <= niu_constants_pkg::niu_exp_slope(x_q4[XFrac-1 -: ExpSeg]);
      f_q5  <= x_q4[ExpFrac-1:0];
      xi_q5 <= x_q4[XBits-1 -: XIntBits];
      gp_q5 <= gp_q4;
    end
  end

  // ---- d6: D * f.
  logic [PeBits-1:0]   pe_q6;
  logic [ExpValue-1:0] e_q6;
  logic [XIntBits-1:0] xi_q6;
  logic [GBits-1:0]    gp_q6;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      pe_q6 <= d_q5 * f_q5;
      e_q6  <= e_q5;
      xi_q6 <= xi_q5;
      gp_q6 <= gp_q5;
    end
  end

  // ---- d7: 2^-f = E - rshr(D*f, 6) in Q1.15; the read table's segment of max(gp, 1): octave
  // o = position of the leading one, n = gp << (14 - o), j = {o, n[13:11]}, fr = n[10:3].  (The
  // read sigma is looked up late, where it is used, so it need not travel down the pipeline.)
  logic [PeRound:0]   pe_sum;
  logic [PeRound-1:0] pe_round;
  assign pe_sum   = {1'b0, pe_q6[PeBits-1 -: PeRound]} + 1'b1;
  assign pe_round = pe_sum[PeRound:1];

  logic [GBits-1:0]   gp_nonzero, gp_normalized;
  logic [OctBits-1:0] gp_octave;
  assign gp_nonzero = (gp_q6 == '0) ? GBits'(1) : gp_q6;
  always_comb begin
    gp_octave = '0;
    for (int b = 0; b < GBits; b++) begin
      if (gp_nonzero[b]) gp_octave = OctBits'(b);
    end
  end
  assign gp_normalized = gp_nonzero << (OctBits'(GBits - 1) - gp_octave);

  logic [ExpValue-1:0] ef_q7;
  logic [RtAddr-1:0]   j_q7;
  logic [RtFrac-1:0]   fr_q7;
  logic [XIntBits-1:0] xi_q7;
  logic [GBits-1:0]    gp_q7;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      ef_q7 <= e_q6 - ExpValue'(pe_round);
      j_q7  <= RtAddr'({gp_octave, gp_normalized[GBits-2 -: RtSeg]});
      fr_q7 <= gp_normalized[GBits-2-RtSeg -: RtFrac];
      xi_q7 <= xi_q6;
      gp_q7 <= gp_q6;
    end
  end

  // ---- d8: gp * 2^-f; the read table's segment (registered read).
  logic [2*Field-1:0] rt_entry_q8;  // {RD[j], RT[j]}
  niu_table #(.Entries(1 << RtAddr), .Width(2 * Field), .AddrBits(RtAddr)) u_read_table (
    .clk_i,
    .we_i    (rt_we_i),
    .waddr_i (rt_waddr_i),
    .wdata_i (rt_wdata_i),
    .adv_i,
    .raddr_i (j_q7),
    .rdata_o (rt_entry_q8)
  );

  logic [PgBits-1:0]   pg_q8;
  logic [RtFrac-1:0]   fr_q8;
  logic [XIntBits-1:0] xi_q8;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      pg_q8 <= gp_q7 * ef_q7;
      fr_q8 <= fr_q7;
      xi_q8 <= xi_q7;
    end
  end

  // ---- d9: g1 = rshr(gp * 2^-f, 15); the integer part of the drift as a factor 2^(15 - xi);
  // RD * fr.
  logic [PgRound:0]    g1_sum;
  logic [PgRound-1:0]  g1_round;
  assign g1_sum   = {1'b0, pg_q8[PgBits-1 -: PgRound]} + 1'b1;
  assign g1_round = g1_sum[PgRound:1];

  logic [GBits-1:0]          g1_q9;
  logic [ExpValue-1:0]       shift_q9;
  logic signed [PrdBits-1:0] prd_q9;
  logic [RtValue-1:0]        rt_q9;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      g1_q9    <= GBits'(g1_round);
      shift_q9 <= ExpValue'(1) << (XIntBits'(ExpOne) - xi_q8);
      prd_q9   <= $signed(rt_entry_q8[Field +: RtSlope]) * $signed({1'b0, fr_q8});
      rt_q9    <= rt_entry_q8[RtValue-1:0];
    end
  end

  // ---- d10: g1 * 2^(15 - xi) (a rounded right shift by xi, in a multiplier); relative read
  // sigma sr = RT + rshr(RD*fr, 8).
  logic signed [PrdRound-1:0] prd_round;
  logic signed [PrdRound:0]   sr_raw;
  assign prd_round = (prd_q9[PrdBits-1 -: PrdRound] + PrdRound'(1)) >>> 1;
  assign sr_raw    = (PrdRound+1)'($signed({1'b0, rt_q9})) + (PrdRound+1)'(prd_round);

  logic [PgBits-1:0]  pd_q10;
  logic [RtValue-1:0] sr_q10;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      pd_q10 <= g1_q9 * shift_q9;
      sr_q10 <= RtValue'(sr_raw);
    end
  end

  // ---- d11: drifted conductance gd.
  logic [PgRound:0]   gd_sum;
  logic [PgRound-1:0] gd_round;
  assign gd_sum   = {1'b0, pd_q10[PgBits-1 -: PgRound]} + 1'b1;
  assign gd_round = gd_sum[PgRound:1];

  logic [GBits-1:0]   gd_q11;
  logic [RtValue-1:0] sr_q11;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      gd_q11 <= GBits'(gd_round);
      sr_q11 <= sr_q10;
    end
  end

  // ---- d12: gd * sr.
  logic [PgBits-1:0] psa_q12;
  logic [GBits-1:0]  gd_q12;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      psa_q12 <= gd_q11 * sr_q11;
      gd_q12  <= gd_q11;
    end
  end

  // ---- d13: absolute read sigma sa (saturating).
  logic [SaRound:0]   sa_sum;
  logic [SaRound-1:0] sa_round;
  assign sa_sum   = {1'b0, psa_q12[PgBits-1 -: SaRound]} + 1'b1;
  assign sa_round = sa_sum[SaRound:1];

  logic [GBits-1:0] sa_q13, gd_q13;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      sa_q13 <= (sa_round > SaRound'(GMax)) ? GBits'(GMax) : GBits'(sa_round);
      gd_q13 <= gd_q12;
    end
  end

  // ---- d14: sa * z3.
  logic signed [ProdBits-1:0] pr_q14;
  logic [GBits-1:0]           gd_q14;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      pr_q14 <= $signed({1'b0, sa_q13}) * z3_i;
      gd_q14 <= gd_q13;
    end
  end

  // ---- d15: read conductance.
  logic signed [HalfBits-1:0] pr_half;
  logic signed [SumBits-1:0]  g_raw;
  assign pr_half = pr_q14[ProdBits-1 -: HalfBits];
  assign g_raw   = SumBits'($signed({1'b0, gd_q14})) + SumBits'((pr_half + HalfBits'(1)) >>> 1);

  always_ff @(posedge clk_i) begin
    if (adv_i) g_o <= (g_raw < 0) ? '0 : (g_raw > SumBits'(GMax)) ? GBits'(GMax) : GBits'(g_raw);
  end

endmodule
