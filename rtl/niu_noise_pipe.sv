// The noise pipeline: `Lanes` lanes (niu_lane), each fed by NIU_RNG_GENS generators
// (niu_xoshiro) that take turns over the 32 / Lanes streams of the lane
// (docs/niu_datapath.md section 4.2: stream k = slot * Lanes + lane serves weights i = k mod 32).
//
// Flow control: the whole pipeline moves together (adv = the output stage is free).  A group
// enters when in_valid_i and adv; only then do the generators step (lock-step rule), so stalls
// and bubbles never change which draws a weight gets.
module niu_noise_pipe #(
  parameter int Lanes = niu_constants_pkg::NIU_LANES_DEFAULT
) (
  input  logic                                                    clk_i,
  input  logic                                                    rst_ni,
  input  logic                                                    clear_i,      // new layer
  input  logic                                                    in_valid_i,
  output logic                                                    in_ready_o,
  input  logic [Lanes*niu_constants_pkg::NIU_CODE_BITS-1:0]       in_data_i,
  output logic                                                    out_valid_o,
  input  logic                                                    out_ready_i,
  output logic [Lanes*niu_constants_pkg::NIU_CODE_BITS-1:0]       out_data_o,
  // Layer constants.
  input  logic [niu_constants_pkg::NIU_LT_BITS-1:0]               lt_i,
  input  logic [niu_constants_pkg::NIU_K_BITS-1:0]                back_k_i,
  input  logic [niu_constants_pkg::NIU_OUT_BITS_FIELD-1:0]        out_bits_i,
  input  logic [niu_constants_pkg::NIU_G_BITS-1:0]                gt0_i,
  input  logic [niu_constants_pkg::NIU_SP_BITS-1:0]               sp0_i,
  input  logic [niu_constants_pkg::NIU_NU_BITS-1:0]               mu0_i,
  input  logic [niu_constants_pkg::NIU_NU_BITS-1:0]               sn0_i,
  // Program load: generator states (one-hot over lane * NIU_RNG_GENS + generator) and tables.
  input  logic [Lanes*niu_constants_pkg::NIU_RNG_GENS-1:0]        rng_load_i,
  input  logic [niu_constants_pkg::NIU_RNG_STATE_BITS-1:0]        rng_state_i,
  input  logic                                                    code_we_i,
  input  logic [niu_constants_pkg::NIU_CODE_INDEX_BITS-1:0]       code_waddr_i,
  input  logic [2*(niu_constants_pkg::NIU_G_BITS+niu_constants_pkg::NIU_NU_BITS)-1:0] code_wdata_i,
  input  logic                                                    rt_we_i,
  input  logic [niu_constants_pkg::NIU_RT_ADDR_BITS-1:0]          rt_waddr_i,
  input  logic [2*niu_constants_pkg::NIU_TABLE_FIELD_BITS-1:0]    table_wdata_i
);

  localparam int CodeBits = niu_constants_pkg::NIU_CODE_BITS;
  localparam int Gens     = niu_constants_pkg::NIU_RNG_GENS;
  localparam int WordBits = niu_constants_pkg::NIU_RNG_WORD_BITS;
  localparam int Stages   = niu_constants_pkg::NIU_PIPE_STAGES;
  localparam int Slots    = niu_constants_pkg::NIU_BEAT_LANES / Lanes;

  // ---- Flow control: one valid bit per stage; everything moves on adv.
  logic [Stages:1] valid_q;
  logic            adv, enter;
  assign adv         = !valid_q[Stages] || out_ready_i;
  assign in_ready_o  = adv;
  assign enter       = in_valid_i && adv;
  assign out_valid_o = valid_q[Stages];

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      valid_q <= '0;
    end else if (clear_i) begin
      valid_q <= '0;
    end else if (adv) begin
      valid_q <= {valid_q[Stages-1:1], enter};
    end
  end

  for (genvar l = 0; l < Lanes; l++) begin : g_lane
    logic [Gens*WordBits-1:0] rand_words;
    for (genvar g = 0; g < Gens; g++) begin : g_gen
      niu_xoshiro #(.Slots(Slots)) u_rng (
        .clk_i, .rst_ni,
        .load_i       (rng_load_i[l*Gens + g]),
        .load_state_i (rng_state_i),
        .step_i       (enter),
        .rand_o       (rand_words[g*WordBits +: WordBits]));
    end

    niu_lane u_lane (
      .clk_i, .adv_i(adv),
      .code_i (in_data_i[CodeBits*l +: CodeBits]),
      .rand_i (rand_words),
      .lt_i, .back_k_i, .out_bits_i, .gt0_i, .sp0_i, .mu0_i, .sn0_i,
      .code_we_i, .code_waddr_i, .code_wdata_i, .rt_we_i, .rt_waddr_i, .table_wdata_i,
      .code_o (out_data_o[CodeBits*l +: CodeBits]));
  end

endmodule
