// The Gaussian ROM address of one uniform (docs/niu_datapath.md section 4.3), combinational:
// sign = u[23]; the magnitude v = u[22:0] is cut into two-bit groups from the top (group g = bits
// 2g and 2g-1); the address is {sign, g of v's leading one, window v[2g : 2g-4]}; v = 0 falls out
// as group 0, window 0.  Two-bit groups halve the leading-one search and the window mux against
// single-bit octaves.
module niu_gauss_index (
  input  logic [niu_constants_pkg::NIU_GAUSS_U_BITS-1:0]      u_i,
  output logic [niu_constants_pkg::NIU_GAUSS_INDEX_BITS-1:0]  index_o
);

  localparam int VBits      = niu_constants_pkg::NIU_GAUSS_V_BITS;
  localparam int Groups     = niu_constants_pkg::NIU_GAUSS_GROUPS;
  localparam int GroupBits  = niu_constants_pkg::NIU_GAUSS_GROUP_BITS;
  localparam int WinBits    = niu_constants_pkg::NIU_GAUSS_WINDOW_BITS;
  localparam int PadBits    = 2 * Groups + WinBits;   // v with a zero above and WinBits-1 zeros below

  logic [GroupBits-1:0] group;
  logic [PadBits-1:0]   padded;
  assign padded = PadBits'({u_i[VBits-1:0], {(WinBits-1){1'b0}}});

  always_comb begin
    group = '0;
    for (int g = 0; g < Groups; g++) begin
      if (padded[2*g + WinBits - 1] || padded[2*g + WinBits - 2]) group = GroupBits'(g);
    end
  end

  assign index_o = {u_i[VBits], group, padded[2*group + WinBits - 1 -: WinBits]};

endmodule
