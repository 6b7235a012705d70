// AXI4 read engine: streams a beat-aligned region of HBM as 256-bit beats.
//
// AR requests are issued as fast as the slave accepts them (several bursts may be outstanding; a
// single ID keeps the data in order).  R data goes straight to the consumer: RREADY is the
// consumer's ready, so back-pressure from the noise pipeline stalls the slave instead of dropping
// data, and no read-side buffer is needed.  The last beat of the transfer is flagged; a short tail
// is read as a full beat (the write engine masks it).
//
// The first beat with RRESP != OKAY is recorded as the beats that were left when it came
// (error_beats_left_o): the write engine writes nothing from that beat on (niu_axi_wr.sv).
module niu_axi_rd (
  input  logic                             clk_i,
  input  logic                             rst_ni,
  // Transfer descriptor, sampled on start_i.
  input  logic                             start_i,
  input  logic [niu_constants_pkg::NIU_AXI_ADDR_BITS-1:0] addr_i,
  input  logic [niu_constants_pkg::NIU_XFER_BITS-niu_constants_pkg::NIU_AXI_BEAT_SHIFT:0] beats_i,
  input  logic [niu_constants_pkg::NIU_AXI_LEN_BITS-1:0] max_len_i,
  output logic                             done_o,   // every beat delivered
  output logic                             error_o,  // sticky: a beat came back with RRESP != OKAY
  output logic [niu_constants_pkg::NIU_XFER_BITS-niu_constants_pkg::NIU_AXI_BEAT_SHIFT:0] error_beats_left_o,  // beats_left at the first error, that beat included
  // AXI4 AR channel.
  output logic                             ar_valid_o,
  input  logic                             ar_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_ADDR_BITS-1:0] ar_addr_o,
  output logic [niu_constants_pkg::NIU_AXI_LEN_BITS-1:0] ar_len_o,
  output logic [niu_constants_pkg::NIU_AXI_SIZE_BITS-1:0] ar_size_o,
  output logic [niu_constants_pkg::NIU_AXI_BURST_BITS-1:0] ar_burst_o,
  // AXI4 R channel.
  input  logic                             r_valid_i,
  output logic                             r_ready_o,
  input  logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0] r_data_i,
  input  logic [niu_constants_pkg::NIU_AXI_RESP_BITS-1:0] r_resp_i,
  // Beat stream to the noise pipeline.
  output logic                             beat_valid_o,
  input  logic                             beat_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0] beat_data_o,
  output logic                             beat_last_o
);

  localparam int BeatCntW  = niu_constants_pkg::NIU_XFER_BITS - niu_constants_pkg::NIU_AXI_BEAT_SHIFT + 1;
  localparam int SizeBits  = niu_constants_pkg::NIU_AXI_SIZE_BITS;
  localparam int BurstBits = niu_constants_pkg::NIU_AXI_BURST_BITS;
  localparam int RespBits  = niu_constants_pkg::NIU_AXI_RESP_BITS;

  logic                ar_done;
  logic [BeatCntW-1:0] beats_left_d, beats_left_q;
  logic                error_d, error_q;
  logic [BeatCntW-1:0] error_beats_left_d, error_beats_left_q;
  logic [BeatCntW-1:0] ar_beats_left_unused;

  niu_burst_gen u_ar_bursts (
    .clk_i,
    .rst_ni,
    .start_i,
    .addr_i,
    .beats_i,
    .max_len_i,
    .allow_i (1'b1),
    .valid_o (ar_valid_o),
    .ready_i (ar_ready_i),
    .addr_o  (ar_addr_o),
    .len_o   (ar_len_o),
    .done_o  (ar_done),
    .beats_left_o (ar_beats_left_unused)
  );

  assign ar_size_o  = SizeBits'(niu_constants_pkg::NIU_AXI_SIZE_BEAT);
  assign ar_burst_o = BurstBits'(niu_constants_pkg::NIU_AXI_BURST_INCR);

  // R beats pass through; the engine only counts them.
  assign beat_valid_o = r_valid_i;
  assign r_ready_o    = beat_ready_i;
  assign beat_data_o  = r_data_i;
  assign beat_last_o  = (beats_left_q == BeatCntW'(1));

  always_comb begin
    beats_left_d = beats_left_q;
    error_d      = error_q;
    error_beats_left_d = error_beats_left_q;
    if (start_i) begin
      beats_left_d = beats_i;
      error_d      = 1'b0;
      error_beats_left_d = '0;
    end else if (r_valid_i && beat_ready_i) begin
      beats_left_d = beats_left_q - 1'b1;
      if (r_resp_i != RespBits'(niu_constants_pkg::NIU_AXI_RESP_OKAY)) begin
        error_d = 1'b1;
        if (!error_q) error_beats_left_d = beats_left_q;
      end
    end
  end

  assign done_o  = ar_done && (beats_left_q == '0);
  assign error_o = error_q;
  assign error_beats_left_o = error_beats_left_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      beats_left_q <= '0;
      error_q      <= 1'b0;
      error_beats_left_q <= '0;
    end else begin
      beats_left_q <= beats_left_d;
      error_q      <= error_d;
      error_beats_left_q <= error_beats_left_d;
    end
  end

endmodule
