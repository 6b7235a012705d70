// The NIU's register port: a simple synchronous-write, combinational-read 32-bit register file.
//
//   0x00 CTRL        W  bit 0: start the program at PROG_ADDR (ignored while busy)
//   0x04 STATUS      R  bit 0 busy, bit 1 done (write 1 to clear), bits 11:8 error code
//   0x08 PROG_ADDR   RW program image base, low word (32-byte aligned)
//   0x0C PROG_ADDR_H RW high word
//   0x10 MAX_BURST   RW AXI AxLEN limit, 0..255 (beats - 1; bursts also stop at 4 KiB)
//   0x14 LAYERS_DONE R  layers completed by the current / last program
//   0x18 STREAM_CYC  R  cycles spent streaming weights (all layers)
//   0x1C STREAM_BEAT R  beats that entered the noise pipeline (all layers)
// Error codes are in niu_pkg.  A register port (not AXI4-Lite) keeps the co-simulation simple;
// an AXI4-Lite shim in front of it is a few flops.
module niu_regs (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic        reg_valid_i,
  input  logic        reg_write_i,
  input  logic [5:0]  reg_addr_i,
  input  logic [31:0] reg_wdata_i,
  output logic [31:0] reg_rdata_o,
  // To the controller.
  output logic        start_o,
  output logic [63:0] prog_addr_o,
  output logic [7:0]  max_len_o,
  // From the controller.
  input  logic        busy_i,
  input  logic        done_set_i,
  input  logic [3:0]  error_i,
  input  logic [15:0] layers_done_i,
  input  logic [31:0] stream_cycles_i,
  input  logic [31:0] stream_beats_i
);

  logic write;
  assign write = reg_valid_i && reg_write_i;

  logic done_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      prog_addr_o <= '0;
      max_len_o   <= 8'd127;
      done_q      <= 1'b0;
    end else begin
      if (write && reg_addr_i == niu_pkg::RegProgAddr)   prog_addr_o[31:0]  <= reg_wdata_i;
      if (write && reg_addr_i == niu_pkg::RegProgAddrHi) prog_addr_o[63:32] <= reg_wdata_i;
      if (write && reg_addr_i == niu_pkg::RegMaxBurst)   max_len_o          <= reg_wdata_i[7:0];
      if (done_set_i) begin
        done_q <= 1'b1;
      end else if ((write && reg_addr_i == niu_pkg::RegStatus && reg_wdata_i[1]) || start_o) begin
        done_q <= 1'b0;
      end
    end
  end

  assign start_o = write && reg_addr_i == niu_pkg::RegCtrl && reg_wdata_i[0] && !busy_i;

  always_comb begin
    reg_rdata_o = '0;
    case (reg_addr_i)
      niu_pkg::RegStatus:     reg_rdata_o = {20'd0, error_i, 6'd0, done_q, busy_i};
      niu_pkg::RegProgAddr:   reg_rdata_o = prog_addr_o[31:0];
      niu_pkg::RegProgAddrHi: reg_rdata_o = prog_addr_o[63:32];
      niu_pkg::RegMaxBurst:   reg_rdata_o = {24'd0, max_len_o};
      niu_pkg::RegLayersDone: reg_rdata_o = {16'd0, layers_done_i};
      niu_pkg::RegStreamCyc:  reg_rdata_o = stream_cycles_i;
      niu_pkg::RegStreamBeat: reg_rdata_o = stream_beats_i;
      default:                reg_rdata_o = '0;
    endcase
  end

endmodule
