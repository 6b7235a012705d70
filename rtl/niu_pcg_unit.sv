// One RNG unit: pcg32 (pcg-cpp setseq_xsh_rr_64_32) sub-streams through a pipelined multiplier.
//
// docs/niu_datapath.md section 4.2: the unit holds Pipe sub-states; beat b uses sub-state
// b mod Pipe, which then jumps by S*Pipe stream positions: s' = s * JumpMult + jump_c (mod 2^64).
// The sub-states live in the Pipe stages of the multiplier itself, so the 64x64 multiply is never
// a one-cycle loop: stage k adds the partial product of the k-th 64/Pipe-bit chunk of s.
//
// Loading: the program's initial sub-states p = 0..Pipe-1 are pushed in order with load_i.  A
// loaded value travels the ring with its bypass bit set, so it comes out unmultiplied; once it is
// the head it has been used, and it re-enters the ring to be jumped.
//
// Lock-step: the ring moves only on step_i (a beat enters the noise pipeline) or load_i; the
// output is xsh_rr(head), the state before the step, as in pcg-cpp.
module niu_pcg_unit #(
  parameter logic [63:0] JumpMult = 64'h1,
  parameter int          Pipe     = 4
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic        load_i,      // push the next initial sub-state
  input  logic [63:0] load_state_i,
  input  logic        step_i,      // a beat enters: emit rand_o and step
  input  logic [63:0] jump_c_i,    // CJ = inc * (A^(S*Pipe-1) + ... + 1), from the program
  output logic [31:0] rand_o       // xsh_rr of the head state
);

  localparam int ChunkW = 64 / Pipe;

  // Stage k holds the state s being jumped, the sum of the partial products of its chunks
  // 0..k-1 (plus jump_c), and the bypass bit of a freshly loaded value.
  // (Flat vectors, 64 bits per stage: Yosys 0.23 has no multi-dimensional packed arrays.)
  logic [Pipe*64-1:0] state_q;
  logic [Pipe*64-1:0] acc_q;
  logic [Pipe-1:0]    bypass_q;

  logic [63:0] head;
  assign head = bypass_q[Pipe-1] ? state_q[(Pipe-1)*64 +: 64] : acc_q[(Pipe-1)*64 +: 64];

  // pcg-cpp's XSH-RR output: rotr32(uint32(((s >> 18) ^ s) >> 27), s >> 59).
  logic [31:0] xorshifted;
  logic [4:0]  rot;
  assign xorshifted = 32'(((head >> 18) ^ head) >> 27);
  assign rot        = head[63:59];
  assign rand_o     = (xorshifted >> rot) | (xorshifted << ((6'd32 - {1'b0, rot}) & 6'd31));

  logic        advance;
  logic [63:0] ring_state_in;
  assign advance       = load_i | step_i;
  assign ring_state_in = load_i ? load_state_i : head;

  // Partial product of chunk k of s with JumpMult, placed at bit k*ChunkW (mod 2^64).
  function automatic logic [63:0] partial(input logic [63:0] s, input int k);
    logic [ChunkW-1:0] chunk;
    chunk   = s[k*ChunkW +: ChunkW];
    partial = (64'(chunk) * JumpMult) << (k * ChunkW);
  endfunction

  for (genvar k = 0; k < Pipe; k++) begin : g_stage
    logic [63:0] state_in, acc_in;
    logic        bypass_in;
    if (k == 0) begin : g_first
      assign state_in  = ring_state_in;
      assign acc_in    = jump_c_i;
      assign bypass_in = load_i;
    end else begin : g_next
      assign state_in  = state_q[(k-1)*64 +: 64];
      assign acc_in    = acc_q[(k-1)*64 +: 64];
      assign bypass_in = bypass_q[k-1];
    end

    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni) begin
        state_q[k*64 +: 64] <= '0;
        acc_q[k*64 +: 64]   <= '0;
        bypass_q[k] <= 1'b0;
      end else if (advance) begin
        state_q[k*64 +: 64] <= state_in;
        acc_q[k*64 +: 64]   <= acc_in + partial(state_in, k);
        bypass_q[k] <= bypass_in;
      end
    end
  end

endmodule
