// A uniform random-number generator: xoshiro128++ (Blackman and Vigna, ACM TOMS 2021) over a
// ring of `Slots` independent streams that take turns (docs/niu_datapath.md section 4.2).
//
// Reusable: any block that needs uniforms in lock-step with a data stream (the NIU's noise
// pipeline, the PU's DAC/ADC noise) instantiates one per 32-bit draw per cycle.
//   - Slots = 1: one stream, one step per step_i.
//   - Slots = S: S streams share the update logic; each step_i uses the stream at the head,
//     steps it and moves it to the tail, so stream s is used on steps s, s + S, s + 2S, ...
//     (the NIU: S = 32 / lanes, so a beat's 32 streams fit any lane count).
// rand_o is the scrambler of the head state, rotl(s0 + s3, 7) + s0, combinational; the state
// steps (and the ring turns) on the clock edge where step_i is high.  No multiplier: the update
// is XORs and shifts (one LUT per state bit), the scrambler two 32-bit adders.
//
// Loading: load_i pushes load_state_i = {s3, s2, s1, s0} in at the tail; after S loads the first
// one is at the head.  The ring registers have a reset so that synthesis keeps them in
// flip-flops (a shift-register LUT would cost a LUT per bit; flip-flops are the cheap resource).
module niu_xoshiro #(
  parameter int Slots = 1
) (
  input  logic                                               clk_i,
  input  logic                                               rst_ni,
  input  logic                                               load_i,
  input  logic [niu_constants_pkg::NIU_RNG_STATE_BITS-1:0]   load_state_i,
  input  logic                                               step_i,
  output logic [niu_constants_pkg::NIU_RNG_WORD_BITS-1:0]    rand_o
);

  localparam int WordBits  = niu_constants_pkg::NIU_RNG_WORD_BITS;
  localparam int StateBits = niu_constants_pkg::NIU_RNG_STATE_BITS;
  localparam int ShiftA    = niu_constants_pkg::NIU_RNG_SHIFT_A;
  localparam int RotB      = niu_constants_pkg::NIU_RNG_ROT_B;
  localparam int RotOut    = niu_constants_pkg::NIU_RNG_ROT_OUT;

  logic [StateBits-1:0] ring_q [Slots];

  logic [WordBits-1:0] s0, s1, s2, s3;
  assign {s3, s2, s1, s0} = ring_q[0];

  // Scrambler: rotl(s0 + s3, 7) + s0.
  logic [WordBits-1:0] sum;
  assign sum    = s0 + s3;
  assign rand_o = {sum[WordBits-RotOut-1:0], sum[WordBits-1:WordBits-RotOut]} + s0;

  // Linear engine: t = s1 << 9; s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3; s2 ^= t; s3 = rotl(s3, 11).
  logic [WordBits-1:0] n0, n1, n2, n3, s2x, s3x;
  assign s2x = s2 ^ s0;
  assign s3x = s3 ^ s1;
  assign n1  = s1 ^ s2x;
  assign n0  = s0 ^ s3x;
  assign n2  = s2x ^ (s1 << ShiftA);
  assign n3  = {s3x[WordBits-RotB-1:0], s3x[WordBits-1:WordBits-RotB]};

  logic [StateBits-1:0] tail_in;
  assign tail_in = load_i ? load_state_i : {n3, n2, n1, n0};

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      for (int s = 0; s < Slots; s++) ring_q[s] <= '0;
    end else if (load_i || step_i) begin
      for (int s = 0; s < Slots - 1; s++) ring_q[s] <= ring_q[s + 1];
      ring_q[Slots - 1] <= tail_in;
    end
  end

endmodule
