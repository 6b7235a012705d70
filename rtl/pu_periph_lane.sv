// One lane of the analog tile peripherals (rtl/pu_periph.sv has the arithmetic), a pipeline of
// NIU_PERIPH_PIPE_STAGES = 8 registers that moves every cycle:
//   1 acc * SCALE        2 rshr SCALE_SHIFT (z arrives)     3 SIGMA * z
//   4 sum, clip          5 v * RECIP                        6 rshr RECIP_SHIFT, code clamp
//   7 code * STEP        8 rshr STEP_SHIFT or v, saturation to 32 bits
// rshr(p, s) = ((p >>> (s-1)) + 1) >>> 1 is the PU's round-half-up shift; the DAC's and the two
// ADC shifts are registers (normalised mantissas keep 31 significant bits at every step size).
// Stage 2's register-controlled rounding (a 64-bit barrel shift and an increment) is no deeper
// than stage 6's, which also clamps, so the DAC shift adds no stage.
module pu_periph_lane (
  input  logic                                                clk_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_MANT_BITS-1:0]  scale_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_SHIFT_BITS-1:0] scale_shift_i,  // >= SCALE_SHIFT_MIN
  input  logic [niu_constants_pkg::NIU_PERIPH_SIGMA_BITS-1:0] sigma_i,
  input  logic                                                clip_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_BOUND_BITS-1:0] bound_i,
  input  logic                                                adc_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_MANT_BITS:0]    recip_i,        // one bit wider: 2^31
  input  logic [niu_constants_pkg::NIU_PERIPH_SHIFT_BITS-1:0] recip_shift_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_MANT_BITS-1:0]  step_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_SHIFT_BITS-1:0] step_shift_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_CODE_BITS-2:0]  code_max_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_ACC_BITS-1:0]   acc_i,   // signed
  input  logic signed [niu_constants_pkg::NIU_Z_BITS-1:0]     z_i,     // two cycles after acc_i
  output logic [niu_constants_pkg::NIU_PERIPH_ACC_BITS-1:0]   y_o      // signed
);

  localparam int AccBits   = niu_constants_pkg::NIU_PERIPH_ACC_BITS;
  localparam int ScaleBits = niu_constants_pkg::NIU_PERIPH_MANT_BITS;
  localparam int ScaleShiftMin = niu_constants_pkg::NIU_PERIPH_SCALE_SHIFT_MIN;
  localparam int SigmaBits = niu_constants_pkg::NIU_PERIPH_SIGMA_BITS;
  localparam int NoiseFrac = niu_constants_pkg::NIU_PERIPH_SIGMA_FRAC + niu_constants_pkg::NIU_Z_FRAC;
  localparam int RecipBits = niu_constants_pkg::NIU_PERIPH_MANT_BITS + 1;
  localparam int StepBits  = niu_constants_pkg::NIU_PERIPH_MANT_BITS;
  localparam int CodeBits  = niu_constants_pkg::NIU_PERIPH_CODE_BITS;
  localparam int ZBits     = niu_constants_pkg::NIU_Z_BITS;

  localparam int P1Bits = AccBits + ScaleBits + 1;      // acc * SCALE (SCALE unsigned)
  localparam int V0Bits = P1Bits - ScaleShiftMin + 1;   // its rounding, with the carry
  localparam int PnBits = SigmaBits + ZBits + 1;        // SIGMA * z
  localparam int NBits  = PnBits - NoiseFrac + 1;
  localparam int VBits  = V0Bits + 1;                   // v0 + noise
  localparam int PaBits = AccBits + RecipBits + 1;      // v * RECIP, v clipped to 32 bits
  localparam int PoBits = CodeBits + StepBits + 1;      // code * STEP

  // Stage 1: DAC step.
  logic signed [P1Bits-1:0] p1_q;
  always_ff @(posedge clk_i) p1_q <= $signed(acc_i) * $signed({1'b0, scale_i});

  // Stage 2: back to accumulator units, v0 = rshr(p1, SCALE_SHIFT).  |p1| < 2^62 and
  // SCALE_SHIFT >= ScaleShiftMin, so p1 >>> (SCALE_SHIFT - 1) plus one fits V0Bits.
  logic signed [V0Bits-1:0] v0_q2, v0_q3;
  always_ff @(posedge clk_i) v0_q2 <= V0Bits'((p1_q >>> (scale_shift_i - 1'b1)) + 1) >>> 1;

  // Stage 3: the noise product; v0 waits.
  logic signed [PnBits-1:0] pn_q;
  always_ff @(posedge clk_i) begin
    pn_q  <= $signed({1'b0, sigma_i}) * z_i;
    v0_q3 <= v0_q2;
  end

  // Stage 4: v = v0 + rshr(noise), clipped.
  logic signed [NBits-1:0] noise;
  logic signed [VBits-1:0] v_sum, v_q4, v_q5, v_q6, v_q7;
  logic signed [VBits-1:0] bound_s;
  assign noise   = NBits'((pn_q >>> (NoiseFrac - 1)) + 1) >>> 1;
  assign v_sum   = VBits'(v0_q3) + VBits'(noise);
  assign bound_s = $signed(VBits'({1'b0, bound_i}));
  always_ff @(posedge clk_i) begin
    if (clip_i && v_sum > bound_s)       v_q4 <= bound_s;
    else if (clip_i && v_sum < -bound_s) v_q4 <= -bound_s;
    else                                 v_q4 <= v_sum;
  end

  // Stage 5: the ADC's reciprocal.  With ADC on, CLIP is on and |v| <= BOUND < 2^31: the low
  // AccBits bits hold v exactly.
  logic signed [PaBits-1:0] pa_q;
  always_ff @(posedge clk_i) begin
    pa_q <= $signed(v_q4[AccBits-1:0]) * $signed({1'b0, recip_i});
    v_q5 <= v_q4;
  end

  // Stage 6: code = clamp(rshr(v * RECIP, RECIP_SHIFT), +-CODE_MAX).  RECIP_SHIFT >= 31 when
  // the ADC is on; the product is at most 2^62 in magnitude.
  logic signed [PaBits-1:0] code_raw, code_max_s;
  logic signed [CodeBits-1:0] code_q;
  assign code_raw   = ((pa_q >>> (recip_shift_i - 1'b1)) + 1) >>> 1;
  assign code_max_s = $signed(PaBits'({1'b0, code_max_i}));
  always_ff @(posedge clk_i) begin
    if (code_raw > code_max_s)       code_q <= CodeBits'(code_max_s);
    else if (code_raw < -code_max_s) code_q <= CodeBits'(-code_max_s);
    else                             code_q <= CodeBits'(code_raw);
    v_q6 <= v_q5;
  end

  // Stage 7: the level's value.
  logic signed [PoBits-1:0] po_q;
  always_ff @(posedge clk_i) begin
    po_q <= code_q * $signed({1'b0, step_i});
    v_q7 <= v_q6;
  end

  // Stage 8: ADC level or v, saturated to the accumulator's 32 bits.
  localparam logic signed [VBits-1:0] AccMax = $signed(VBits'({1'b0, {(AccBits-1){1'b1}}}));
  logic signed [PoBits-1:0] level;
  logic signed [VBits-1:0] chosen;
  assign level  = ((po_q >>> (step_shift_i - 1'b1)) + 1) >>> 1;   // STEP_SHIFT >= 1 when the ADC is on
  assign chosen = adc_i ? VBits'(level) : v_q7;
  always_ff @(posedge clk_i) begin
    if (chosen > AccMax)            y_o <= AccMax[AccBits-1:0];
    else if (chosen < -AccMax - 1)  y_o <= {1'b1, {(AccBits-1){1'b0}}};
    else                            y_o <= chosen[AccBits-1:0];
  end

endmodule
