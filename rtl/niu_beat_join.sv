// Collects groups of `Lanes` noisy codes back into 256-bit beats (the inverse of niu_beat_split).
//
// The assembled beat waits in out_q until the consumer takes it; the first group of the next beat
// may be written in that same cycle (the consumer samples the old contents on that edge), so with
// Lanes = 32 a beat passes every cycle.  group_ready_o depends only on registers and out_ready_i.
module niu_beat_join #(
  parameter int Lanes = niu_constants_pkg::NIU_LANES_DEFAULT
) (
  input  logic                                                      clk_i,
  input  logic                                                      rst_ni,
  input  logic                                                      clear_i,
  input  logic                                                      group_valid_i,
  output logic                                                      group_ready_o,
  input  logic [Lanes*niu_constants_pkg::NIU_CODE_BITS-1:0]         group_data_i,
  output logic                                                      out_valid_o,
  input  logic                                                      out_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0]           out_data_o
);

  localparam int GroupBits = Lanes * niu_constants_pkg::NIU_CODE_BITS;
  localparam int Groups    = niu_constants_pkg::NIU_BEAT_LANES / Lanes;
  localparam int SlotBits  = (Groups > 1) ? $clog2(Groups) : 1;
  localparam int DataBits  = niu_constants_pkg::NIU_AXI_DATA_BITS;

  logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0] beat_q;   // groups of the beat being built
  logic [SlotBits-1:0]                             slot_q;
  logic                                            full_q;   // beat_q is complete, waiting

  logic take_group, last_group;
  assign group_ready_o = !full_q || out_ready_i;
  assign take_group    = group_valid_i && group_ready_o;
  assign last_group    = (Groups == 1) || (slot_q == SlotBits'(Groups - 1));
  assign out_valid_o   = full_q;
  assign out_data_o    = beat_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      full_q <= 1'b0;
      slot_q <= '0;
    end else if (clear_i) begin
      full_q <= 1'b0;
      slot_q <= '0;
    end else begin
      if (take_group) begin
        slot_q <= last_group ? '0 : slot_q + 1'b1;
        full_q <= last_group;
      end else if (out_ready_i) begin
        full_q <= 1'b0;
      end
    end
  end

  // Groups enter at the top and shift down, so after the last group the first one is at the
  // bottom: no write-enable decoding per slot.
  if (Groups == 1) begin : g_whole
    always_ff @(posedge clk_i) begin
      if (take_group) beat_q <= group_data_i;
    end
  end else begin : g_shift
    always_ff @(posedge clk_i) begin
      if (take_group) beat_q <= {group_data_i, beat_q[DataBits-1:GroupBits]};
    end
  end

endmodule
