// Turns the 256-bit beats of a program read into a stream of 32-bit words, one per cycle.
//
// Program blocks (the header and every layer block) start on a beat: the program is beat-aligned
// and the header and blocks are whole beats (rtl/niu_gen.py and niu.sv check it), so every beat
// delivers all its words.  Each delivered word carries its index within the block.
module niu_word_unpack (
  input  logic                                                           clk_i,
  input  logic                                                           rst_ni,
  input  logic                                                           start_i,
  // Beats in.
  input  logic                                                           beat_valid_i,
  output logic                                                           beat_ready_o,
  input  logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0]                beat_data_i,
  // Words out (no back-pressure: the loader takes one word per cycle).
  output logic                                                           word_valid_o,
  output logic [niu_constants_pkg::NIU_WORD_BITS-1:0]                    word_o,
  output logic [niu_constants_pkg::NIU_WORD_INDEX_BITS-1:0]              word_index_o
);

  localparam int WordBits  = niu_constants_pkg::NIU_WORD_BITS;
  localparam int WordsBeat = niu_constants_pkg::NIU_WORDS_PER_BEAT;
  localparam int SlotBits  = $clog2(WordsBeat);
  localparam int LeftBits  = SlotBits + 1;   // 0..WordsBeat

  logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0] beat_q;
  logic [LeftBits-1:0]  words_left_q;   // words of beat_q still to deliver (0 = empty)
  logic [SlotBits-1:0]  slot_q;         // next word of beat_q to deliver
  logic [niu_constants_pkg::NIU_WORD_INDEX_BITS-1:0] index_q;

  logic take_beat;
  assign beat_ready_o = (words_left_q <= LeftBits'(1));
  assign take_beat    = beat_valid_i && beat_ready_o;
  assign word_valid_o = (words_left_q != '0);
  assign word_o       = beat_q[WordBits*slot_q +: WordBits];
  assign word_index_o = index_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      words_left_q <= '0;
      slot_q       <= '0;
      index_q      <= '0;
    end else if (start_i) begin
      words_left_q <= '0;
      slot_q       <= '0;
      index_q      <= '0;
    end else begin
      if (word_valid_o) index_q <= index_q + 1'b1;
      if (take_beat) begin
        words_left_q <= LeftBits'(WordsBeat);
        slot_q       <= '0;
      end else if (word_valid_o) begin
        words_left_q <= words_left_q - 1'b1;
        slot_q       <= slot_q + 1'b1;
      end
    end
  end

  always_ff @(posedge clk_i) begin
    if (take_beat) beat_q <= beat_data_i;
  end

endmodule
