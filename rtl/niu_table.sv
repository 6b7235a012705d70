// A per-layer look-up table: one write port (the program loader broadcasts to every copy) and one
// registered read port that moves with the pipeline (adv_i), so a stalled pipeline keeps its read
// data.  A block that needs several data-dependent reads per cycle instantiates several copies.
//
// The tables sit in UltraRAM (ram_style "ultra"; Yosys maps them with synth_xilinx -uram): the
// NIU takes the slot of a PU, whose 64 URAMs hold weights and are free here, while block RAM is
// the scarce resource of the slot (20 BRAM36, which the Gaussian ROMs use).  A URAM has no
// initial contents, which a table loaded from the program does not need.
module niu_table #(
  parameter int Entries  = niu_constants_pkg::NIU_CODE_TABLE,
  parameter int Width    = niu_constants_pkg::NIU_TABLE_FIELD_BITS,
  parameter int AddrBits = $clog2(Entries)
) (
  input  logic                clk_i,
  input  logic                we_i,
  input  logic [AddrBits-1:0] waddr_i,
  input  logic [Width-1:0]    wdata_i,
  input  logic                adv_i,
  input  logic [AddrBits-1:0] raddr_i,
  output logic [Width-1:0]    rdata_o
);

  (* ram_style = "ultra" *) logic [Width-1:0] mem_q [Entries];

  always_ff @(posedge clk_i) begin
    if (we_i) mem_q[waddr_i] <= wdata_i;
  end

  always_ff @(posedge clk_i) begin
    if (adv_i) rdata_o <= mem_q[raddr_i];
  end

endmodule
