// Splits 256-bit beats into groups of `Lanes` weights, one group per cycle that the noise
// pipeline accepts (group r of a beat = lanes r*Lanes .. r*Lanes + Lanes - 1).
//
// A beat is held until its last group is taken; the next beat is accepted in that same cycle, so
// with Lanes = 32 a beat passes every cycle.  in_ready_o depends only on registers and on
// group_ready_i (the pipeline's advance).
module niu_beat_split #(
  parameter int Lanes = niu_constants_pkg::NIU_LANES_DEFAULT
) (
  input  logic                                                      clk_i,
  input  logic                                                      rst_ni,
  input  logic                                                      clear_i,
  input  logic                                                      in_valid_i,
  output logic                                                      in_ready_o,
  input  logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0]           in_data_i,
  output logic                                                      group_valid_o,
  input  logic                                                      group_ready_i,
  output logic [Lanes*niu_constants_pkg::NIU_CODE_BITS-1:0]         group_data_o
);

  localparam int GroupBits = Lanes * niu_constants_pkg::NIU_CODE_BITS;
  localparam int Groups    = niu_constants_pkg::NIU_BEAT_LANES / Lanes;
  localparam int SlotBits  = (Groups > 1) ? $clog2(Groups) : 1;

  logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0] beat_q;
  logic                                            full_q;
  logic [SlotBits-1:0]                             slot_q;

  logic take_group, last_group;
  assign group_valid_o = full_q;
  assign take_group    = full_q && group_ready_i;
  assign last_group    = (Groups == 1) || (slot_q == SlotBits'(Groups - 1));
  assign in_ready_o    = !full_q || (take_group && last_group);
  assign group_data_o  = beat_q[GroupBits*slot_q +: GroupBits];

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      full_q <= 1'b0;
      slot_q <= '0;
    end else if (clear_i) begin
      full_q <= 1'b0;
      slot_q <= '0;
    end else begin
      if (in_valid_i && in_ready_o) begin
        full_q <= 1'b1;
        slot_q <= '0;
      end else if (take_group && last_group) begin
        full_q <= 1'b0;
      end else if (take_group) begin
        slot_q <= slot_q + 1'b1;
      end
    end
  end

  // A slot mux on the output (GroupBits x Groups:1) costs fewer LUTs than shifting the beat, whose
  // every bit would need a three-way input mux.
  always_ff @(posedge clk_i) begin
    if (in_valid_i && in_ready_o) beat_q <= in_data_i;
  end

endmodule
