// NIU register map and error codes (see niu_regs.sv and docs/niu_rtl.md).
package niu_pkg;

  localparam logic [5:0] RegCtrl       = 6'h00;
  localparam logic [5:0] RegStatus     = 6'h04;
  localparam logic [5:0] RegProgAddr   = 6'h08;
  localparam logic [5:0] RegProgAddrHi = 6'h0C;
  localparam logic [5:0] RegMaxBurst   = 6'h10;
  localparam logic [5:0] RegLayersDone = 6'h14;
  localparam logic [5:0] RegStreamCyc  = 6'h18;
  localparam logic [5:0] RegStreamBeat = 6'h1C;

  // STATUS[11:8]: why the last program stopped early (0: it ran to the end).
  localparam logic [3:0] ErrNone       = 4'd0;
  localparam logic [3:0] ErrBadHeader  = 4'd1;  // magic, version or layer size mismatch
  localparam logic [3:0] ErrAlignment  = 4'd2;  // program, source or destination not 32-byte aligned
  localparam logic [3:0] ErrBadLayer   = 4'd3;  // OUT_BITS outside 2..8, or BACK_K wider than 18 bits
  localparam logic [3:0] ErrReadResp   = 4'd4;  // an R beat came back with an error response
  localparam logic [3:0] ErrWriteResp  = 4'd5;  // a B response was an error
  localparam logic [3:0] ErrAddrRange  = 4'd6;  // an address beyond the AXI address width

endpackage
