// Decodes the words of one program layer block (docs/niu_datapath.md section 5) into the layer's
// registers, the table writes and the generator loads of the noise pipeline.
//
// Word offsets come from the generated NIU_LAYER_* constants.  Generator states are listed by
// (generator g, stream k), four words each; stream k belongs to lane k mod Lanes, whose ring for
// generator g receives its streams in order, so the program does not depend on the lane count.
// Entry 0 of the per-code table is also kept in registers: it is the off device of every weight.
module niu_loader #(
  parameter int Lanes = niu_constants_pkg::NIU_LANES_DEFAULT
) (
  input  logic                                                    clk_i,
  input  logic                                                    rst_ni,
  input  logic                                                    clear_i,  // a block starts
  input  logic                                                    word_valid_i,
  input  logic [niu_constants_pkg::NIU_WORD_BITS-1:0]             word_i,
  input  logic [niu_constants_pkg::NIU_WORD_INDEX_BITS-1:0]       word_index_i,
  // Layer fields.
  output logic [2*niu_constants_pkg::NIU_WORD_BITS-1:0]           src_addr_o,
  output logic [2*niu_constants_pkg::NIU_WORD_BITS-1:0]           dst_addr_o,
  output logic [niu_constants_pkg::NIU_WORD_BITS-1:0]             count_o,
  output logic [niu_constants_pkg::NIU_WORD_BITS-1:0]             out_bits_o,
  output logic [niu_constants_pkg::NIU_WORD_BITS-1:0]             back_k_o,
  output logic [niu_constants_pkg::NIU_WORD_BITS-1:0]             drift_lt_o,
  output logic [niu_constants_pkg::NIU_G_BITS-1:0]                gt0_o,
  output logic [niu_constants_pkg::NIU_SP_BITS-1:0]               sp0_o,
  output logic [niu_constants_pkg::NIU_NU_BITS-1:0]               mu0_o,
  output logic [niu_constants_pkg::NIU_NU_BITS-1:0]               sn0_o,
  // Noise pipeline loads.
  output logic [Lanes*niu_constants_pkg::NIU_RNG_GENS-1:0]        rng_load_o,
  output logic [niu_constants_pkg::NIU_RNG_STATE_BITS-1:0]        rng_state_o,
  output logic                                                    code_we_o,
  output logic [niu_constants_pkg::NIU_CODE_INDEX_BITS-1:0]       code_waddr_o,
  output logic [2*(niu_constants_pkg::NIU_G_BITS+niu_constants_pkg::NIU_NU_BITS)-1:0] code_wdata_o,  // {SN, MU, SP, GT}
  output logic                                                    rt_we_o,
  output logic [niu_constants_pkg::NIU_RT_ADDR_BITS-1:0]          rt_waddr_o,
  output logic [niu_constants_pkg::NIU_WORD_BITS-1:0]             table_wdata_o,
  // Every read-table segment of this block so far ends inside RT's range (see below).
  output logic                                                    read_table_ok_o
);

  localparam int WordBits   = niu_constants_pkg::NIU_WORD_BITS;
  localparam int IndexBits  = niu_constants_pkg::NIU_WORD_INDEX_BITS;
  localparam int Gens       = niu_constants_pkg::NIU_RNG_GENS;
  localparam int Streams    = niu_constants_pkg::NIU_BEAT_LANES;
  localparam int StateWords = niu_constants_pkg::NIU_RNG_STATE_WORDS;
  localparam int CodeTable  = niu_constants_pkg::NIU_CODE_TABLE;
  localparam int CodeIndex  = niu_constants_pkg::NIU_CODE_INDEX_BITS;
  localparam int RtAddr     = niu_constants_pkg::NIU_RT_ADDR_BITS;
  localparam int RtSegments = niu_constants_pkg::NIU_RT_SEGMENTS;
  localparam int RtValue    = niu_constants_pkg::NIU_RT_VALUE_BITS;
  localparam int RtSlope    = niu_constants_pkg::NIU_RT_SLOPE_BITS;
  localparam int SegEndBits = ((RtValue > RtSlope) ? RtValue : RtSlope) + 2;  // RT + RD, signed
  localparam int GBits      = niu_constants_pkg::NIU_G_BITS;
  localparam int SpBits     = niu_constants_pkg::NIU_SP_BITS;
  localparam int NuBits     = niu_constants_pkg::NIU_NU_BITS;
  localparam int Field      = niu_constants_pkg::NIU_TABLE_FIELD_BITS;
  localparam int WSrc       = niu_constants_pkg::NIU_LAYER_SRC_ADDR;
  localparam int WDst       = niu_constants_pkg::NIU_LAYER_DST_ADDR;
  localparam int WCount     = niu_constants_pkg::NIU_LAYER_COUNT;
  localparam int WOutBits   = niu_constants_pkg::NIU_LAYER_OUT_BITS;
  localparam int WBackK     = niu_constants_pkg::NIU_LAYER_BACK_K;
  localparam int WDriftLt   = niu_constants_pkg::NIU_LAYER_DRIFT_LT;
  localparam int WCode      = niu_constants_pkg::NIU_LAYER_CODE_TABLE;
  localparam int WRead      = niu_constants_pkg::NIU_LAYER_READ_TABLE;
  localparam int WRng       = niu_constants_pkg::NIU_LAYER_RNG_STATES;
  localparam int StreamBits = $clog2(Streams);
  localparam int PartBits   = $clog2(StateWords);
  localparam int EntryBits  = $clog2(Gens * Streams);
  localparam int GenBits    = $clog2(Gens);
  localparam int LaneBits   = (Lanes > 1) ? $clog2(Lanes) : 1;
  localparam int LoadBits   = $clog2(Lanes * Gens);         // index into rng_load_o

  logic [IndexBits-1:0] w;
  assign w = word_index_i;

  function automatic logic in_range(input logic [IndexBits-1:0] idx, input int lo, input int words);
    in_range = (idx >= IndexBits'(lo)) && (idx < IndexBits'(lo + words));
  endfunction

  // ---- Tables: the read table takes one word per entry; a code-table entry is written whole when
  // its second word (MU, SN) arrives, the first (GT, SP) waiting in a register.
  logic                 in_code, in_read;
  logic [CodeIndex:0]   code_offset;   // entry and half
  logic [RtAddr-1:0]    read_offset;
  assign in_code     = in_range(w, WCode, 2 * CodeTable);
  assign in_read     = in_range(w, WRead, RtSegments);
  assign code_offset = (CodeIndex + 1)'(w - IndexBits'(WCode));
  assign read_offset = RtAddr'(w - IndexBits'(WRead));

  logic [GBits+SpBits-1:0] code_low_q;  // {SP, GT} of the entry being loaded
  always_ff @(posedge clk_i) begin
    if (word_valid_i && in_code && !code_offset[0]) code_low_q <= {word_i[Field +: SpBits], word_i[GBits-1:0]};
  end
  assign code_we_o     = word_valid_i && in_code && code_offset[0];
  assign code_waddr_o  = code_offset[CodeIndex:1];
  assign code_wdata_o  = {word_i[Field +: NuBits], word_i[NuBits-1:0], code_low_q};
  assign rt_we_o       = word_valid_i && in_read;
  assign rt_waddr_o    = read_offset;
  assign table_wdata_o = word_i;

  // ---- Read-table segments: RT + RD must stay in RT's unsigned range.  The datapath interpolates
  // in RtValue bits and would wrap a segment that ends above it, where the C++ model does not;
  // from_words refuses the same images, so RTL and model agree on every image either accepts.
  logic signed [SegEndBits-1:0] rt_start, rt_slope, rt_segment_end;
  assign rt_start       = SegEndBits'(word_i[RtValue-1:0]);
  assign rt_slope       = SegEndBits'($signed(word_i[Field +: RtSlope]));
  assign rt_segment_end = rt_start + rt_slope;
  // Unsigned compare: a negative end has its sign bit set and is out of range too.
  logic rt_segment_bad;
  assign rt_segment_bad = ($unsigned(rt_segment_end) > SegEndBits'((1 << RtValue) - 1));

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      read_table_ok_o <= 1'b1;
    end else if (clear_i) begin
      read_table_ok_o <= 1'b1;
    end else if (rt_we_o && rt_segment_bad) begin
      read_table_ok_o <= 1'b0;
    end
  end

  // ---- Generator states: entry e = (generator, stream), four words s0..s3; the last one loads.
  logic                          in_rng;
  logic [PartBits+EntryBits-1:0] rng_offset;
  logic [EntryBits-1:0]          entry;       // generator * 32 + stream
  logic [PartBits-1:0]           part;
  logic [GenBits-1:0]            generator;
  assign in_rng     = in_range(w, WRng, Gens * Streams * StateWords);
  assign rng_offset = (PartBits + EntryBits)'(w - IndexBits'(WRng));
  assign part       = rng_offset[PartBits-1:0];
  assign entry      = rng_offset[PartBits +: EntryBits];
  assign generator  = GenBits'(entry >> StreamBits);

  logic [(StateWords-1)*WordBits-1:0] state_low_q;  // s0..s2 wait for s3
  always_ff @(posedge clk_i) begin
    if (word_valid_i && in_rng) state_low_q <= {word_i, state_low_q[(StateWords-1)*WordBits-1:WordBits]};
  end
  assign rng_state_o = {word_i, state_low_q};

  logic [LaneBits-1:0] lane;
  assign lane = (Lanes > 1) ? LaneBits'(entry) : '0;  // stream mod Lanes: Lanes divides 32

  always_comb begin
    rng_load_o = '0;
    if (word_valid_i && in_rng && part == PartBits'(StateWords - 1)) begin
      rng_load_o[LoadBits'(lane) * LoadBits'(Gens) + LoadBits'(generator)] = 1'b1;
    end
  end

  // ---- Scalar fields, and entry 0 of the per-code table (the off device).
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      src_addr_o <= '0;
      dst_addr_o <= '0;
      count_o    <= '0;
      out_bits_o <= '0;
      back_k_o   <= '0;
      drift_lt_o <= '0;
      gt0_o      <= '0;
      sp0_o      <= '0;
      mu0_o      <= '0;
      sn0_o      <= '0;
    end else if (word_valid_i) begin
      if (w == IndexBits'(WSrc))      src_addr_o[WordBits-1:0]        <= word_i;
      if (w == IndexBits'(WSrc + 1))  src_addr_o[WordBits +: WordBits] <= word_i;
      if (w == IndexBits'(WDst))      dst_addr_o[WordBits-1:0]        <= word_i;
      if (w == IndexBits'(WDst + 1))  dst_addr_o[WordBits +: WordBits] <= word_i;
      if (w == IndexBits'(WCount))    count_o    <= word_i;
      if (w == IndexBits'(WOutBits))  out_bits_o <= word_i;
      if (w == IndexBits'(WBackK))    back_k_o   <= word_i;
      if (w == IndexBits'(WDriftLt))  drift_lt_o <= word_i;
      if (w == IndexBits'(WCode)) begin
        gt0_o <= word_i[GBits-1:0];
        sp0_o <= word_i[Field +: SpBits];
      end
      if (w == IndexBits'(WCode + 1)) begin
        mu0_o <= word_i[NuBits-1:0];
        sn0_o <= word_i[Field +: NuBits];
      end
    end
  end

endmodule
