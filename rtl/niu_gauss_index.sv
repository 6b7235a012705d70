// The Gaussian ROM address of one uniform of UBits bits (docs/niu_datapath.md section 4.3),
// combinational: sign = u[UBits-1]; the magnitude v = u[UBits-2:0] is cut into groups of three
// bits aligned at its top bit (group g = bits 3g+o .. 3g+o-2, o = (UBits-2) mod 3); the address
// is {sign, g of v's leading one, the 6-bit window v[3g+o : 3g+o-5]}; v = 0 falls out as group 0,
// window 0.  Three-bit groups keep the leading-one search and the window mux small (8 positions
// for 24-bit uniforms) while the window's leading one still resolves 1/8..1/63 of its octave.
module niu_gauss_index #(
  parameter int UBits = niu_constants_pkg::NIU_GAUSS_CHIP_U_BITS
) (
  input  logic [UBits-1:0]                                    u_i,
  output logic [niu_constants_pkg::NIU_GAUSS_INDEX_BITS-1:0]  index_o
);

  localparam int VBits     = UBits - 1;
  localparam int Span      = niu_constants_pkg::NIU_GAUSS_GROUP_SPAN;
  localparam int GroupBits = niu_constants_pkg::NIU_GAUSS_GROUP_BITS;
  localparam int WinBits   = niu_constants_pkg::NIU_GAUSS_WINDOW_BITS;
  localparam int Offset    = (VBits - 1) % Span;            // group g's top bit is Span*g + Offset
  localparam int PadBits   = VBits + WinBits;               // v with WinBits zeros below

  logic [GroupBits-1:0] group;
  logic [PadBits-1:0]   padded;
  assign padded = {u_i[VBits-1:0], {WinBits{1'b0}}};

  // Group of the leading one: bit b belongs to group (b - Offset + Span - 1) / Span; the last
  // set bit, the leading one, decides.
  always_comb begin
    group = '0;
    for (int b = 0; b < VBits; b++) begin
      if (padded[b + WinBits]) group = GroupBits'((b - Offset + Span - 1) / Span);
    end
  end

  // The window of each group sits at a fixed position: an 8-way mux, not a barrel shifter.
  logic [WinBits-1:0] window;
  always_comb begin
    window = '0;
    for (int g = 0; g * Span < VBits; g++) begin
      if (group == GroupBits'(g)) window = padded[Span * g + Offset + WinBits -: WinBits];
    end
  end

  assign index_o = {u_i[VBits], group, window};

endmodule
