// Standard normal from one 32-bit uniform by a table inverse CDF (docs/niu_datapath.md 4.3).
//
//   neg = r[31]; v = max(r[30:0], 1); o = lzc31(v); n = v << o;
//   j = (30 - o) * 16 + n[29:26]; f = n[25:0];
//   m = Z[j] + rshr((Z[j+1] - Z[j]) * f, 26);  z = neg ? -m : m      (Q3.12)
// Three stages, each moving on adv_i: normalise, table look-up, interpolate.
module niu_gauss (
  input  logic               clk_i,
  input  logic               adv_i,   // the noise pipeline moves this cycle
  input  logic [31:0]        rand_i,
  output logic signed [15:0] z_o
);

  localparam int FracBits = niu_constants_pkg::NIU_GAUSS_FRAC_BITS;  // 26
  localparam int SegBits  = niu_constants_pkg::NIU_GAUSS_SEG_BITS;   // 4

  // Stage 1: sign, octave and segment of the 31-bit magnitude.
  logic [30:0] v;
  logic [4:0]  octave_lz;    // leading zeros of v in 31 bits, 0..30
  logic [29:0] normalized;   // the bits below the leading one, which lands at bit 30
  assign v = (rand_i[30:0] == '0) ? 31'd1 : rand_i[30:0];

  always_comb begin
    octave_lz = 5'd30;
    for (int b = 0; b <= 30; b++) begin
      if (v[b]) octave_lz = 5'(30 - b);
    end
  end
  assign normalized = 30'(v << octave_lz);

  logic                neg_q1;
  logic [8:0]          index_q1;
  logic [FracBits-1:0] frac_q1;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      neg_q1   <= rand_i[31];
      index_q1 <= (9'd30 - 9'(octave_lz)) * 9'(1 << SegBits)
                + 9'(normalized[FracBits +: SegBits]);
      frac_q1  <= normalized[FracBits-1:0];
    end
  end

  // Stage 2: the two knots around the point, registered straight out of the ROM so that a
  // synthesizer can map the look-up to a dual-port block RAM with output registers.
  logic signed [15:0]  knot_lo, knot_hi;  // Z[j], Z[j+1]
`ifdef VERILATOR
  // Simulation only: the knots as one constant vector built at elaboration from the generated
  // function, so Verilator indexes a constant instead of expanding a 497-way case for each of
  // the 192 instances (a 100 MB model).  Icarus 11 cannot evaluate this constant function;
  // Icarus and Yosys take the plain look-up below, which is the same ROM.
  localparam int Entries = niu_constants_pkg::NIU_GAUSS_ENTRIES;
  function automatic logic [Entries*16-1:0] knot_vector();
    for (int k = 0; k < Entries; k++) knot_vector[16*k +: 16] = niu_constants_pkg::niu_gauss_z(9'(k));
  endfunction
  localparam logic [Entries*16-1:0] ZRom = knot_vector();
  assign knot_lo = ZRom[16*index_q1 +: 16];
  assign knot_hi = ZRom[16*(index_q1 + 9'd1) +: 16];
`else
  assign knot_lo = niu_constants_pkg::niu_gauss_z(index_q1);
  assign knot_hi = niu_constants_pkg::niu_gauss_z(index_q1 + 9'd1);
`endif

  logic                neg_q2;
  logic signed [15:0]  knot_q2, knot_next_q2;  // Z[j], Z[j+1]
  logic [FracBits-1:0] frac_q2;
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      neg_q2   <= neg_q1;
      knot_q2      <= knot_lo;
      knot_next_q2 <= knot_hi;
      frac_q2  <= frac_q1;
    end
  end

  // Stage 3: linear interpolation with round-half-up, then the sign.  (The slope's subtraction
  // fits a DSP48E2 pre-adder.)
  logic signed [16:0] slope;   // Z[j+1] - Z[j]
  logic signed [43:0] slope_times_frac;
  assign slope = 17'(knot_next_q2) - 17'(knot_q2);
  logic signed [15:0] magnitude;  // |z| <= 6.3 in Q3.12: 15 bits
  assign slope_times_frac = 44'(slope) * $signed({1'b0, frac_q2});
  assign magnitude = knot_q2 + 16'((slope_times_frac + (44'sd1 <<< (FracBits - 1))) >>> FracBits);

  always_ff @(posedge clk_i) begin
    if (adv_i) z_o <= neg_q2 ? -magnitude : magnitude;
  end

endmodule
