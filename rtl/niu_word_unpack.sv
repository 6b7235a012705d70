// Turns the 256-bit beats of a program read into a stream of 32-bit words, one per cycle.
//
// Program blocks start at any word address (a layer block is 2594 words long, so most are not
// beat aligned): the read covers the enclosing beats and the first skip_i words are dropped.
// Each delivered word carries its index within the block.
module niu_word_unpack (
  input  logic         clk_i,
  input  logic         rst_ni,
  input  logic         start_i,
  input  logic [2:0]   skip_i,       // words to drop at the start of the first beat
  // Beats in.
  input  logic         beat_valid_i,
  output logic         beat_ready_o,
  input  logic [255:0] beat_data_i,
  // Words out (no back-pressure: the loader takes one word per cycle).
  output logic         word_valid_o,
  output logic [31:0]  word_o,
  output logic [15:0]  word_index_o
);

  logic [255:0] beat_q;
  logic [3:0]   words_left_q;   // words of beat_q still to deliver (0 = empty)
  logic [2:0]   slot_q;         // next word of beat_q to deliver
  logic [2:0]   skip_q;         // skip still owed by the first beat
  logic [15:0]  index_q;

  logic take_beat;
  assign beat_ready_o = (words_left_q <= 4'd1);
  assign take_beat    = beat_valid_i && beat_ready_o;
  assign word_valid_o = (words_left_q != '0);
  assign word_o       = beat_q[32*slot_q +: 32];
  assign word_index_o = index_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      words_left_q <= '0;
      slot_q       <= '0;
      skip_q       <= '0;
      index_q      <= '0;
    end else if (start_i) begin
      words_left_q <= '0;
      slot_q       <= '0;
      skip_q       <= skip_i;
      index_q      <= '0;
    end else begin
      if (word_valid_o) index_q <= index_q + 16'd1;
      if (take_beat) begin
        words_left_q <= 4'd8 - {1'b0, skip_q};
        slot_q       <= skip_q;
        skip_q       <= '0;
      end else if (word_valid_o) begin
        words_left_q <= words_left_q - 4'd1;
        slot_q       <= slot_q + 3'd1;
      end
    end
  end

  always_ff @(posedge clk_i) begin
    if (take_beat) beat_q <= beat_data_i;
  end

endmodule
