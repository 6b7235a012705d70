// Splits one transfer (a beat-aligned start address and a beat count) into AXI4 INCR bursts.
//
// A burst ends at whichever comes first: the end of the transfer, the next 4 KiB boundary (AXI4
// forbids crossing it), or the configured maximum burst length.  The maximum is a register so that
// tests can randomize burst boundaries, and so that a system can limit how long one NIU holds an
// HBM channel.  The write engine runs two of these in step: one for AW, one to place WLAST, so the
// W channel never waits for an AW handshake (AXI4 A3.3.1 dependency rules).
//
// The maximum is sampled with the transfer (start_i) and held until the next one: the AW generator
// runs ahead of the W generator, so if both read a register that changes mid-transfer, WLAST would
// no longer fall where AWLEN said and the W generator could never finish (docs/niu_rtl.md).
//
// allow_i gates the next burst (the write engine stops issuing bursts after a read error).  A
// burst once offered stays offered until taken, as AXI requires of AxVALID, whatever allow_i does.
module niu_burst_gen (
  input  logic                                                   clk_i,
  input  logic                                                   rst_ni,
  // Transfer to split; sampled when start_i is high.
  input  logic                                                   start_i,
  input  logic [niu_constants_pkg::NIU_AXI_ADDR_BITS-1:0]        addr_i,
  input  logic [niu_constants_pkg::NIU_XFER_BITS-niu_constants_pkg::NIU_AXI_BEAT_SHIFT:0] beats_i,
  input  logic [niu_constants_pkg::NIU_AXI_LEN_BITS-1:0]         max_len_i,  // max burst length minus one (AxLEN), sampled with start_i
  input  logic                                                   allow_i,    // a new burst may be offered
  // Burst stream.
  output logic                                                   valid_o,
  input  logic                                                   ready_i,
  output logic [niu_constants_pkg::NIU_AXI_ADDR_BITS-1:0]        addr_o,
  output logic [niu_constants_pkg::NIU_AXI_LEN_BITS-1:0]         len_o,      // beats minus one (AxLEN)
  output logic                                                   done_o,     // every burst handed out
  output logic [niu_constants_pkg::NIU_XFER_BITS-niu_constants_pkg::NIU_AXI_BEAT_SHIFT:0] beats_left_o  // beats not yet in a taken burst
);

  localparam int AddrBits  = niu_constants_pkg::NIU_AXI_ADDR_BITS;
  localparam int BeatShift = niu_constants_pkg::NIU_AXI_BEAT_SHIFT;
  localparam int BeatCntW  = niu_constants_pkg::NIU_XFER_BITS - BeatShift + 1;
  localparam int LenBits   = niu_constants_pkg::NIU_AXI_LEN_BITS;
  localparam int PageBytes = niu_constants_pkg::NIU_AXI_PAGE_BYTES;
  localparam int PageBeats = PageBytes >> BeatShift;
  localparam int PageBeatW = $clog2(PageBeats) + 1;
  localparam int PageBits  = $clog2(PageBytes);

  logic [AddrBits-1:0] addr_d, addr_q;
  logic [BeatCntW-1:0] beats_left_d, beats_left_q;
  logic [LenBits-1:0]  max_len_d, max_len_q;  // the transfer's burst limit, fixed at start_i
  logic                offered_q;             // valid_o was high and not taken last cycle

  // Beats from the current address to the next 4 KiB boundary: 1..128.
  logic [PageBeatW-1:0] beats_to_page_end;
  // Beats allowed by the max-burst register: 1..256, capped to a page (128) below.
  logic [PageBeatW-1:0] beats_max;
  logic [PageBeatW-1:0] beats_cap;     // min(page end, max burst): 1..128
  logic [PageBeatW-1:0] burst_beats;   // min(cap, beats left): 1..128 while valid

  assign beats_to_page_end = PageBeatW'(PageBeats) - PageBeatW'(addr_q[PageBits-1:BeatShift]);
  assign beats_max = (max_len_q >= LenBits'(PageBeats - 1)) ? PageBeatW'(PageBeats)
                                                           : PageBeatW'(max_len_q) + 1'b1;
  assign beats_cap = (beats_max < beats_to_page_end) ? beats_max : beats_to_page_end;
  assign burst_beats = (BeatCntW'(beats_cap) < beats_left_q) ? beats_cap : PageBeatW'(beats_left_q);

  assign valid_o = (beats_left_q != '0) && (allow_i || offered_q);
  assign done_o  = (beats_left_q == '0);
  assign beats_left_o = beats_left_q;
  assign addr_o  = addr_q;
  assign len_o   = LenBits'(burst_beats - 1'b1);

  always_comb begin
    addr_d       = addr_q;
    beats_left_d = beats_left_q;
    max_len_d    = max_len_q;
    if (start_i) begin
      addr_d       = addr_i;
      beats_left_d = beats_i;
      max_len_d    = max_len_i;
    end else if (valid_o && ready_i) begin
      addr_d       = addr_q + (AddrBits'(burst_beats) << BeatShift);
      beats_left_d = beats_left_q - BeatCntW'(burst_beats);
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      addr_q       <= '0;
      beats_left_q <= '0;
      max_len_q    <= '0;
      offered_q    <= 1'b0;
    end else begin
      addr_q       <= addr_d;
      beats_left_q <= beats_left_d;
      max_len_q    <= max_len_d;
      offered_q    <= !start_i && valid_o && !ready_i;
    end
  end

endmodule
