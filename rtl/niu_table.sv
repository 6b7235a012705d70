// A per-layer look-up table with one write port (program load) and synchronous read ports.
//
// The noise pipeline reads a table at several data-dependent indices per cycle; each read port
// is a copy of the table (what an FPGA does with LUTRAM/BRAM replicas).  Reads are registered
// and move only on adv_i, so a stalled pipeline keeps its read data.  Ports come in pairs
// (index, index + 1) for the linear interpolations of the spec.
module niu_table #(
  parameter int Entries = 128,
  parameter int Width   = 17,
  parameter int Ports   = 1
) (
  input  logic                       clk_i,
  input  logic                       we_i,
  input  logic [$clog2(Entries)-1:0] waddr_i,
  input  logic [Width-1:0]           wdata_i,
  input  logic                       adv_i,
  input  logic [Ports*$clog2(Entries)-1:0] raddr_i,   // port p at bits [p*AddrW +: AddrW]
  output logic [Ports*Width-1:0]           rdata_o    // port p at bits [p*Width +: Width]
);

  localparam int AddrW = $clog2(Entries);

  for (genvar p = 0; p < Ports; p++) begin : g_copy
    logic [Width-1:0] mem_q [Entries];
    always_ff @(posedge clk_i) begin
      if (we_i) mem_q[waddr_i] <= wdata_i;
    end
    always_ff @(posedge clk_i) begin
      if (adv_i) rdata_o[p*Width +: Width] <= mem_q[raddr_i[p*AddrW +: AddrW]];
    end
  end

endmodule
