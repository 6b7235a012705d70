// Analog tile peripherals in the PU's post-processing (docs/peripherals.md): between the
// write-reorder buffer's read side (R_g accumulators per cycle) and requantisation, each lane
// turns the GEMM of the DAC codes into the value an ADC would digitise:
//
//   v    = rshr(acc * SCALE, SCALE_SHIFT)                   DAC step back to accumulator units,
//        + rshr(SIGMA * z, 20)                              plus output noise (z: Q3.12 normal)
//   v    = clamp(v, -BOUND, BOUND)                          if CLIP
//   y    = rshr(clamp(rshr(v * RECIP, RECIP_SHIFT), +-CODE_MAX) * STEP, STEP_SHIFT)   if ADC,
//          else sat32(v)
//
// SCALE (the DAC step), RECIP and STEP are normalised mantissas with register shifts, so every
// step size keeps 31 significant bits; the driver keeps SCALE_SHIFT in
// [NIU_PERIPH_SCALE_SHIFT_MIN, 63], RECIP_SHIFT >= 31 and STEP_SHIFT >= 1.
//
// The C++ model is niu/peripherals.hpp (periph_datapath); the co-simulation
// (tests/cosim/test_periph_cosim.cpp) compares every result bit for bit.
//
// Rate: one chunk of Lanes results per cycle, every cycle, with a fixed latency of
// NIU_PERIPH_PIPE_STAGES cycles and no ready signal: the block can never stall the PU.
//
// Noise: the NIU's generator design, instantiated.  Each lane has one xoshiro128++ stream
// (niu_xoshiro, loaded by the driver with the (seed, chip, layer, round, image, lane) state) that
// steps once per chunk; its top 24 bits address the NIU's 24-bit Gaussian ROM (niu_gauss: one
// dual-port ROM per pair of lanes).
module pu_periph #(
  parameter int Lanes = niu_constants_pkg::NIU_PERIPH_LANES
) (
  input  logic                                                clk_i,
  input  logic                                                rst_ni,
  // Registers of the current (layer, image), stable while its chunks flow.
  input  logic [niu_constants_pkg::NIU_PERIPH_MANT_BITS-1:0]  scale_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_SHIFT_BITS-1:0] scale_shift_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_SIGMA_BITS-1:0] sigma_i,
  input  logic                                                clip_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_BOUND_BITS-1:0] bound_i,
  input  logic                                                adc_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_MANT_BITS:0]    recip_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_SHIFT_BITS-1:0] recip_shift_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_MANT_BITS-1:0]  step_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_SHIFT_BITS-1:0] step_shift_i,
  input  logic [niu_constants_pkg::NIU_PERIPH_CODE_BITS-2:0]  code_max_i,
  // Generator loading: one state per cycle, lane 0 first (each lane's ring has one slot).
  input  logic [Lanes-1:0]                                    seed_load_i,
  input  logic [niu_constants_pkg::NIU_RNG_STATE_BITS-1:0]    seed_state_i,
  // One chunk of Lanes accumulators in, its digitised values out NIU_PERIPH_PIPE_STAGES later.
  input  logic                                                valid_i,
  input  logic [Lanes*niu_constants_pkg::NIU_PERIPH_ACC_BITS-1:0] acc_i,
  output logic                                                valid_o,
  output logic [Lanes*niu_constants_pkg::NIU_PERIPH_ACC_BITS-1:0] y_o
);

  localparam int AccBits   = niu_constants_pkg::NIU_PERIPH_ACC_BITS;
  localparam int ZBits     = niu_constants_pkg::NIU_Z_BITS;
  localparam int UBits     = niu_constants_pkg::NIU_GAUSS_CHIP_U_BITS;
  localparam int WordBits  = niu_constants_pkg::NIU_RNG_WORD_BITS;
  localparam int Stages    = niu_constants_pkg::NIU_PERIPH_PIPE_STAGES;

  // The normals of a chunk arrive two cycles after it (index and ROM registers of niu_gauss),
  // where the lanes' datapaths expect them.
  logic [Lanes*ZBits-1:0] z_all;

  for (genvar p = 0; p < Lanes / 2; p++) begin : g_pair
    logic [WordBits-1:0] rand_a, rand_b;
    niu_xoshiro u_rng_a (
      .clk_i, .rst_ni,
      .load_i       (seed_load_i[2*p]),
      .load_state_i (seed_state_i),
      .step_i       (valid_i),
      .rand_o       (rand_a)
    );
    niu_xoshiro u_rng_b (
      .clk_i, .rst_ni,
      .load_i       (seed_load_i[2*p+1]),
      .load_state_i (seed_state_i),
      .step_i       (valid_i),
      .rand_o       (rand_b)
    );
    logic signed [ZBits-1:0] z_a, z_b;
    niu_gauss #(.UBits(UBits)) u_gauss (
      .clk_i,
      .adv_i  (1'b1),
      .swap_i (1'b0),
      .u_a_i  (rand_a[WordBits-1 -: UBits]),
      .u_b_i  (rand_b[WordBits-1 -: UBits]),
      .z_a_o  (z_a),
      .z_b_o  (z_b)
    );
    assign z_all[2*p*ZBits +: ZBits]     = z_a;
    assign z_all[(2*p+1)*ZBits +: ZBits] = z_b;
  end

  for (genvar l = 0; l < Lanes; l++) begin : g_lane
    pu_periph_lane u_lane (
      .clk_i,
      .scale_i, .scale_shift_i, .sigma_i, .clip_i, .bound_i, .adc_i, .recip_i, .recip_shift_i,
      .step_i, .step_shift_i, .code_max_i,
      .acc_i (acc_i[l*AccBits +: AccBits]),
      .z_i   (z_all[l*ZBits +: ZBits]),
      .y_o   (y_o[l*AccBits +: AccBits])
    );
  end

  logic [Stages-1:0] valid_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) valid_q <= '0;
    else         valid_q <= {valid_q[Stages-2:0], valid_i};
  end
  assign valid_o = valid_q[Stages-1];

endmodule
