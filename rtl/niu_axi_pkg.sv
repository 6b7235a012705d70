// AXI4 constants and helpers shared by the NIU's read and write engines.
//
// The NIU talks to one HBM pseudo-channel through a 256-bit AXI4 master port, like the PU it
// replaces.  Bursts are INCR, full width (32 bytes per beat), and never cross a 4 KiB boundary
// (AXI4 rule A3.4.1).  Addresses are beat aligned; the byte length of a transfer is arbitrary and
// the write engine masks the tail beat with WSTRB.
package niu_axi_pkg;

  localparam int DataW     = 256;               // bits per beat
  localparam int BeatBytes = DataW / 8;         // 32
  localparam int BeatShift = $clog2(BeatBytes); // 5
  localparam int AddrW     = 34;                // 16 GiB: covers the U50's 8 GiB HBM
  localparam int LenW      = 32;                // transfer length in bytes
  localparam int BeatCntW  = LenW - BeatShift + 1; // beats of one transfer, rounded up
  localparam int PageBeats = 4096 / BeatBytes;  // beats in one 4 KiB page (128)
  localparam int PageBeatW = $clog2(PageBeats) + 1; // holds 1..128

  localparam logic [2:0] AxSizeBeat = 3'(BeatShift); // AxSIZE for a full 256-bit beat
  localparam logic [1:0] BurstIncr  = 2'b01;
  localparam logic [1:0] RespOkay   = 2'b00;

endpackage
