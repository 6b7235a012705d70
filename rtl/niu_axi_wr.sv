// AXI4 write engine: writes a stream of 256-bit beats to a beat-aligned region of HBM.
//
// Two burst generators run in step over the same transfer: one issues AW requests, the other tells
// the W side where each burst ends (WLAST).  The W channel therefore never waits for an AW
// handshake, as AXI4's dependency rules require.  When the byte length is not a multiple of a
// beat, the tail beat carries a partial WSTRB so the bytes after the region stay untouched.
// The engine is done when every beat is sent and every burst has its B response.
//
// After a read error (read_error_i, from the first beat with RRESP != OKAY, whose position is
// read_error_beats_left_i) nothing from that beat on is written, and no burst is started for it:
//   - AW offers a new burst only while its first beat comes before the error beat;
//   - W starts a burst only if its first beat comes before the error beat or its AW has been
//     offered (AXI: every AW taken gets its whole burst), and sends the error beat and all later
//     ones with WSTRB = 0;
//   - the beats after the last such burst are taken from the pipeline and dropped.
// So the bytes of the beats before the error beat are written, and none after: bursts offered
// before the error was seen complete with empty strobes.  A beat's write comes long after its
// read (the noise pipeline), so the error is always known before its beat reaches W.
module niu_axi_wr (
  input  logic                             clk_i,
  input  logic                             rst_ni,
  // Transfer descriptor, sampled on start_i.
  input  logic                             start_i,
  input  logic [niu_constants_pkg::NIU_AXI_ADDR_BITS-1:0] addr_i,
  input  logic [niu_constants_pkg::NIU_XFER_BITS-1:0] len_bytes_i,
  input  logic [niu_constants_pkg::NIU_AXI_LEN_BITS-1:0] max_len_i,
  output logic                             done_o,
  output logic                             error_o,  // sticky: BRESP != OKAY
  // The read side of the stream: an error response, and the beats that were left at it.
  input  logic                             read_error_i,
  input  logic [niu_constants_pkg::NIU_XFER_BITS-niu_constants_pkg::NIU_AXI_BEAT_SHIFT:0] read_error_beats_left_i,
  // Beat stream from the noise pipeline.
  input  logic                             beat_valid_i,
  output logic                             beat_ready_o,
  input  logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0] beat_data_i,
  // AXI4 AW channel.
  output logic                             aw_valid_o,
  input  logic                             aw_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_ADDR_BITS-1:0] aw_addr_o,
  output logic [niu_constants_pkg::NIU_AXI_LEN_BITS-1:0] aw_len_o,
  output logic [niu_constants_pkg::NIU_AXI_SIZE_BITS-1:0] aw_size_o,
  output logic [niu_constants_pkg::NIU_AXI_BURST_BITS-1:0] aw_burst_o,
  // AXI4 W channel.
  output logic                             w_valid_o,
  input  logic                             w_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0] w_data_o,
  output logic [niu_constants_pkg::NIU_AXI_STRB_BITS-1:0] w_strb_o,
  output logic                             w_last_o,
  // AXI4 B channel.
  input  logic                             b_valid_i,
  output logic                             b_ready_o,
  input  logic [niu_constants_pkg::NIU_AXI_RESP_BITS-1:0] b_resp_i
);

  localparam int BeatShift = niu_constants_pkg::NIU_AXI_BEAT_SHIFT;
  localparam int BeatCntW  = niu_constants_pkg::NIU_XFER_BITS - BeatShift + 1;
  localparam int LenBits   = niu_constants_pkg::NIU_AXI_LEN_BITS;
  localparam int SizeBits  = niu_constants_pkg::NIU_AXI_SIZE_BITS;
  localparam int BurstBits = niu_constants_pkg::NIU_AXI_BURST_BITS;
  localparam int RespBits  = niu_constants_pkg::NIU_AXI_RESP_BITS;
  localparam int BeatBytes = niu_constants_pkg::NIU_AXI_BEAT_BYTES;

  // Beats in the transfer, rounded up, and the byte count of the tail beat (0: a full beat).
  logic [BeatCntW-1:0]  beats;
  assign beats = BeatCntW'(len_bytes_i >> BeatShift) + BeatCntW'(len_bytes_i[BeatShift-1:0] != '0);

  logic                 aw_done;
  logic                 w_burst_valid;
  logic [LenBits-1:0]   w_burst_len;
  logic [LenBits-1:0]   w_beat_in_burst_d, w_beat_in_burst_q;
  logic [BeatCntW-1:0]  w_beats_left_d, w_beats_left_q;
  logic [BeatShift-1:0] tail_bytes_d, tail_bytes_q;
  logic [BeatCntW-1:0]  bursts_open_d, bursts_open_q;  // AW issued minus B received
  logic                 error_d, error_q;
  logic [BeatCntW-1:0]  aw_beats_left;     // beats not yet in an AW burst that was taken
  logic                 aw_allow;          // AW may offer its next burst
  logic                 w_new_burst_ok;    // W may start its next burst
  logic                 w_open;            // W is in a burst, or may start one
  logic                 w_drop;            // beats are dropped: no burst left to write them in
  logic                 w_poisoned;        // the current W beat is the error beat or later

  // Beats are counted down (beats left), the same way on the read and write sides: a beat comes
  // at or after the error beat when its beats-left is at most the error beat's.
  assign aw_allow   = !read_error_i || (aw_beats_left > read_error_beats_left_i);
  assign w_poisoned = read_error_i && (w_beats_left_q <= read_error_beats_left_i);

  niu_burst_gen u_aw_bursts (
    .clk_i,
    .rst_ni,
    .start_i,
    .addr_i,
    .beats_i   (beats),
    .max_len_i,
    .allow_i   (aw_allow),
    .valid_o   (aw_valid_o),
    .ready_i   (aw_ready_i),
    .addr_o    (aw_addr_o),
    .len_o     (aw_len_o),
    .done_o    (aw_done),
    .beats_left_o (aw_beats_left)
  );

  logic [niu_constants_pkg::NIU_AXI_ADDR_BITS-1:0] w_burst_addr_unused;
  logic                                            w_bursts_done_unused;  // the beat count says when W is done
  logic [BeatCntW-1:0]                             w_burst_beats_left_unused;
  niu_burst_gen u_w_bursts (
    .clk_i,
    .rst_ni,
    .start_i,
    .addr_i,
    .beats_i   (beats),
    .max_len_i,
    .allow_i   (1'b1),
    .valid_o   (w_burst_valid),
    .ready_i   (w_valid_o && w_ready_i && w_last_o),
    .addr_o    (w_burst_addr_unused),
    .len_o     (w_burst_len),
    .done_o    (w_bursts_done_unused),
    .beats_left_o (w_burst_beats_left_unused)
  );

  assign aw_size_o  = SizeBits'(niu_constants_pkg::NIU_AXI_SIZE_BEAT);
  assign aw_burst_o = BurstBits'(niu_constants_pkg::NIU_AXI_BURST_INCR);

  // W side: data flows whenever a burst is open on the W burst generator and W may be in it.
  // At a burst boundary W's beats-left is the first beat of its next burst; that burst's AW was
  // taken when AW's beats-left is below it, and is offered when they are equal.
  assign w_new_burst_ok = !read_error_i || (w_beats_left_q > read_error_beats_left_i)
                       || (w_beats_left_q > aw_beats_left)
                       || (aw_valid_o && w_beats_left_q == aw_beats_left);
  assign w_open       = w_burst_valid && (w_beat_in_burst_q != '0 || w_new_burst_ok);
  assign w_drop       = read_error_i && !w_open;
  assign w_valid_o    = beat_valid_i && w_open;
  assign beat_ready_o = (w_ready_i && w_open) || w_drop;
  assign w_data_o     = beat_data_i;
  assign w_last_o     = (w_beat_in_burst_q == w_burst_len);

  // Tail strobe: only the last beat of the transfer can be partial.  No byte of the error beat
  // or a later one is written.
  always_comb begin
    w_strb_o = '1;
    if (w_poisoned) begin
      w_strb_o = '0;
    end else if (w_beats_left_q == BeatCntW'(1) && tail_bytes_q != '0) begin
      for (int b = 0; b < BeatBytes; b++) begin
        w_strb_o[b] = (BeatShift'(b) < tail_bytes_q);
      end
    end
  end

  assign b_ready_o = 1'b1;

  always_comb begin
    w_beat_in_burst_d = w_beat_in_burst_q;
    w_beats_left_d    = w_beats_left_q;
    tail_bytes_d      = tail_bytes_q;
    bursts_open_d     = bursts_open_q;
    error_d           = error_q;
    if (start_i) begin
      w_beat_in_burst_d = '0;
      w_beats_left_d    = beats;
      tail_bytes_d      = len_bytes_i[BeatShift-1:0];
      bursts_open_d     = '0;
      error_d           = 1'b0;
    end else begin
      if (w_valid_o && w_ready_i) begin
        w_beat_in_burst_d = w_last_o ? '0 : w_beat_in_burst_q + 1'b1;
        w_beats_left_d    = w_beats_left_q - 1'b1;
      end else if (w_drop && beat_valid_i) begin
        w_beats_left_d    = w_beats_left_q - 1'b1;
      end
      // One burst opens per AW handshake and closes per B handshake (both may happen at once).
      bursts_open_d = bursts_open_q + BeatCntW'(aw_valid_o && aw_ready_i)
                                    - BeatCntW'(b_valid_i);
      if (b_valid_i && b_resp_i != RespBits'(niu_constants_pkg::NIU_AXI_RESP_OKAY)) error_d = 1'b1;
    end
  end

  // Every beat sent or dropped, no AW offered (all taken, or none left that may be), every B back.
  assign done_o  = (aw_done || (read_error_i && !aw_valid_o)) && (w_beats_left_q == '0) && (bursts_open_q == '0);
  assign error_o = error_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      w_beat_in_burst_q <= '0;
      w_beats_left_q    <= '0;
      tail_bytes_q      <= '0;
      bursts_open_q     <= '0;
      error_q           <= 1'b0;
    end else begin
      w_beat_in_burst_q <= w_beat_in_burst_d;
      w_beats_left_q    <= w_beats_left_d;
      tail_bytes_q      <= tail_bytes_d;
      bursts_open_q     <= bursts_open_d;
      error_q           <= error_d;
    end
  end

endmodule
