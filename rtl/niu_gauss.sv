// Two standard normals (Q3.12) from two uniforms of UBits bits, 2 + Delay stages later
// (docs/niu_datapath.md section 4.3).  Reusable with its ROM (niu_gauss_rom): one block RAM
// serves the pair; tie swap_i to 0 where the pair needs no routing.
//
//   z = ROM[{sign, group, window}] (niu_gauss_index): the ROM cell holds the mean of |Z| over
//   the cell's share of the tail probability, negated for sign = 1, so no multiplier and no
//   interpolation is needed.
// Stage 1 registers the ROM address, stage 2 + Delay is the ROM's output register.
module niu_gauss #(
  parameter int UBits = niu_constants_pkg::NIU_GAUSS_CHIP_U_BITS,  // uniform width: 24 or 16
  parameter int Delay = 0   // extra stages between the address register and the ROM
) (
  input  logic                                                clk_i,
  input  logic                                                adv_i,   // the pipeline moves
  input  logic                                                swap_i,  // z_a from u_b and z_b from u_a
  input  logic [UBits-1:0]                                    u_a_i,
  input  logic [UBits-1:0]                                    u_b_i,
  output logic signed [niu_constants_pkg::NIU_Z_BITS-1:0]     z_a_o,
  output logic signed [niu_constants_pkg::NIU_Z_BITS-1:0]     z_b_o
);

  localparam int IndexBits = niu_constants_pkg::NIU_GAUSS_INDEX_BITS;

  logic [IndexBits-1:0] index_a, index_b, index_a_q, index_b_q;

  niu_gauss_index #(.UBits(UBits)) u_index_a (.u_i(u_a_i), .index_o(index_a));
  niu_gauss_index #(.UBits(UBits)) u_index_b (.u_i(u_b_i), .index_o(index_b));

  // Swapping the two addresses (ten bits) is the cheapest place to route a pair.
  always_ff @(posedge clk_i) begin
    if (adv_i) begin
      index_a_q <= swap_i ? index_b : index_a;
      index_b_q <= swap_i ? index_a : index_b;
    end
  end

  // A late consumer (the NIU's read noise) delays the ten-bit addresses, not the normals.
  logic [2*IndexBits-1:0] addr_pair;
  if (Delay == 0) begin : g_now
    assign addr_pair = {index_b_q, index_a_q};
  end else begin : g_late
    logic [2*IndexBits-1:0] late_q [Delay];
    always_ff @(posedge clk_i) begin
      if (adv_i) begin
        late_q[0] <= {index_b_q, index_a_q};
        for (int d = 1; d < Delay; d++) late_q[d] <= late_q[d-1];
      end
    end
    assign addr_pair = late_q[Delay-1];
  end

  logic [niu_constants_pkg::NIU_Z_BITS-1:0] rom_a, rom_b;
  niu_gauss_rom #(.UBits(UBits)) u_rom (
    .clk_i,
    .en_i     (adv_i),
    .addr_a_i (addr_pair[IndexBits-1:0]),
    .addr_b_i (addr_pair[IndexBits +: IndexBits]),
    .data_a_o (rom_a),
    .data_b_o (rom_b)
  );
  assign z_a_o = $signed(rom_a);
  assign z_b_o = $signed(rom_b);

endmodule
