// Decodes the words of one program layer block (docs/niu_datapath.md section 5) into the layer's
// registers, the table writes and the RNG sub-state loads of the noise pipeline.
//
// Word offsets come from the generated NIU_LAYER_* constants, so a change of the program layout
// (e.g. another RNG pipeline depth) needs no edit here.  Entry 0 of GT, SP, MU and SN is also
// kept in registers: it is the off device's target for every weight.
module niu_loader (
  input  logic         clk_i,
  input  logic         rst_ni,
  input  logic         word_valid_i,
  input  logic [31:0]  word_i,
  input  logic [15:0]  word_index_i,
  // Layer fields.
  output logic [63:0]  src_addr_o,
  output logic [63:0]  dst_addr_o,
  output logic [31:0]  count_o,
  output logic [31:0]  out_bits_o,
  output logic [31:0]  back_k_o,
  output logic [63:0]  chip_jump_c_o,
  output logic [63:0]  read_jump_c_o,
  output logic [16:0]  gt0_o,
  output logic [16:0]  sp0_o,
  output logic [17:0]  mu0_o,
  output logic [16:0]  sn0_o,
  // Noise pipeline loads.
  output logic [niu_constants_pkg::NIU_CHIP_SLOTS-1:0] chip_load_o,
  output logic [niu_constants_pkg::NIU_READ_SLOTS-1:0] read_load_o,
  output logic [63:0]  load_state_o,
  output logic         gt_we_o,
  output logic         sp_we_o,
  output logic         mu_we_o,
  output logic         sn_we_o,
  output logic         df_we_o,
  output logic         rt_we_o,
  output logic [8:0]   table_waddr_o,
  output logic [17:0]  table_wdata_o
);

  localparam int ChipSlots  = niu_constants_pkg::NIU_CHIP_SLOTS;
  localparam int ReadSlots  = niu_constants_pkg::NIU_READ_SLOTS;
  localparam int Pipe       = niu_constants_pkg::NIU_RNG_PIPE;
  localparam int CodeTable  = niu_constants_pkg::NIU_CODE_TABLE;
  localparam int WSrc       = niu_constants_pkg::NIU_LAYER_SRC_ADDR;
  localparam int WDst       = niu_constants_pkg::NIU_LAYER_DST_ADDR;
  localparam int WCount     = niu_constants_pkg::NIU_LAYER_COUNT;
  localparam int WOutBits   = niu_constants_pkg::NIU_LAYER_OUT_BITS;
  localparam int WBackK     = niu_constants_pkg::NIU_LAYER_BACK_K;
  localparam int WChipJump  = niu_constants_pkg::NIU_LAYER_CHIP_JUMP_C;
  localparam int WReadJump  = niu_constants_pkg::NIU_LAYER_READ_JUMP_C;
  localparam int WChipState = niu_constants_pkg::NIU_LAYER_CHIP_STATES;
  localparam int WReadState = niu_constants_pkg::NIU_LAYER_READ_STATES;
  localparam int WGt        = niu_constants_pkg::NIU_LAYER_GT;
  localparam int WSp        = niu_constants_pkg::NIU_LAYER_SP;
  localparam int WMu        = niu_constants_pkg::NIU_LAYER_MU;
  localparam int WSn        = niu_constants_pkg::NIU_LAYER_SN;
  localparam int WDf        = niu_constants_pkg::NIU_LAYER_DF;
  localparam int WRt        = niu_constants_pkg::NIU_LAYER_RT;
  localparam int WEnd       = niu_constants_pkg::NIU_LAYER_WORDS;

  // Which region a word falls in, and its offset there.
  logic [15:0] w;
  assign w = word_index_i;

  function automatic logic in_range(input logic [15:0] idx, input logic [15:0] lo, input logic [15:0] hi);
    in_range = (idx >= lo) && (idx < hi);
  endfunction

  logic in_chip_states, in_read_states;
  // Word offset inside the state arrays (2 words per state), modulo two rows of units.
  logic [$clog2(ChipSlots):0] chip_word;
  logic [$clog2(ReadSlots):0] read_word;
  assign in_chip_states = in_range(w, 16'(WChipState), 16'(WChipState + 2 * Pipe * ChipSlots));
  assign in_read_states = in_range(w, 16'(WReadState), 16'(WReadState + 2 * Pipe * ReadSlots));
  assign chip_word      = ($clog2(ChipSlots)+1)'(w - 16'(WChipState));
  assign read_word      = ($clog2(ReadSlots)+1)'(w - 16'(WReadState));

  // The low word of a 64-bit state waits here for its high word.
  logic [31:0] low_word_q;
  always_ff @(posedge clk_i) begin
    if (word_valid_i) low_word_q <= word_i;
  end
  assign load_state_o = {word_i, low_word_q};

  // State entry k = (word offset) / 2 belongs to unit k mod slots; its high word loads it.
  always_comb begin
    chip_load_o = '0;
    read_load_o = '0;
    if (word_valid_i && in_chip_states && chip_word[0]) begin
      chip_load_o[chip_word[$clog2(ChipSlots):1]] = 1'b1;
    end
    if (word_valid_i && in_read_states && read_word[0]) begin
      read_load_o[read_word[$clog2(ReadSlots):1]] = 1'b1;
    end
  end

  // Tables: one write per word, the address is the offset inside the table.
  logic in_gt, in_sp, in_mu, in_sn, in_df, in_rt;
  assign in_gt = in_range(w, 16'(WGt), 16'(WGt + CodeTable));
  assign in_sp = in_range(w, 16'(WSp), 16'(WSp + CodeTable));
  assign in_mu = in_range(w, 16'(WMu), 16'(WMu + CodeTable));
  assign in_sn = in_range(w, 16'(WSn), 16'(WSn + CodeTable));
  assign in_df = in_range(w, 16'(WDf), 16'(WRt));
  assign in_rt = in_range(w, 16'(WRt), 16'(WEnd));

  assign gt_we_o = word_valid_i && in_gt;
  assign sp_we_o = word_valid_i && in_sp;
  assign mu_we_o = word_valid_i && in_mu;
  assign sn_we_o = word_valid_i && in_sn;
  assign df_we_o = word_valid_i && in_df;
  assign rt_we_o = word_valid_i && in_rt;
  assign table_wdata_o = word_i[17:0];

  always_comb begin
    table_waddr_o = '0;
    if (in_gt) table_waddr_o = 9'(w - 16'(WGt));
    if (in_sp) table_waddr_o = 9'(w - 16'(WSp));
    if (in_mu) table_waddr_o = 9'(w - 16'(WMu));
    if (in_sn) table_waddr_o = 9'(w - 16'(WSn));
    if (in_df) table_waddr_o = 9'(w - 16'(WDf));
    if (in_rt) table_waddr_o = 9'(w - 16'(WRt));
  end

  // Scalar fields.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      src_addr_o    <= '0;
      dst_addr_o    <= '0;
      count_o       <= '0;
      out_bits_o    <= '0;
      back_k_o      <= '0;
      chip_jump_c_o <= '0;
      read_jump_c_o <= '0;
      gt0_o         <= '0;
      sp0_o         <= '0;
      mu0_o         <= '0;
      sn0_o         <= '0;
    end else if (word_valid_i) begin
      if (w == 16'(WSrc))          src_addr_o[31:0]     <= word_i;
      if (w == 16'(WSrc + 1))      src_addr_o[63:32]    <= word_i;
      if (w == 16'(WDst))          dst_addr_o[31:0]     <= word_i;
      if (w == 16'(WDst + 1))      dst_addr_o[63:32]    <= word_i;
      if (w == 16'(WCount))        count_o              <= word_i;
      if (w == 16'(WOutBits))      out_bits_o           <= word_i;
      if (w == 16'(WBackK))        back_k_o             <= word_i;
      if (w == 16'(WChipJump))     chip_jump_c_o[31:0]  <= word_i;
      if (w == 16'(WChipJump + 1)) chip_jump_c_o[63:32] <= word_i;
      if (w == 16'(WReadJump))     read_jump_c_o[31:0]  <= word_i;
      if (w == 16'(WReadJump + 1)) read_jump_c_o[63:32] <= word_i;
      if (w == 16'(WGt))           gt0_o                <= word_i[16:0];
      if (w == 16'(WSp))           sp0_o                <= word_i[16:0];
      if (w == 16'(WMu))           mu0_o                <= word_i[17:0];
      if (w == 16'(WSn))           sn0_o                <= word_i[16:0];
    end
  end

endmodule
