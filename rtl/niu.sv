// NIU top level: AXI4-Lite control, program loader, AXI4 read engine -> beat split -> noise
// pipeline (Lanes lanes) -> beat join -> AXI4 write engine (docs/niu_rtl.md).  One AXI4 master
// port of 256 bits, like the PU the NIU replaces.
//
// A run executes a whole NIU program (docs/niu_datapath.md section 5) from HBM: the header, then
// for each layer its block (tables, generator states, addresses) and then the layer's weights,
// streamed from SRC_ADDR through the noise pipeline to DST_ADDR.  The host writes PROG_ADDR_LO/HI
// and CTRL.start and polls STATUS.done (register map: docs/niu_generated.md).
//
// Lanes (1, 2, 4, 8, 16 or 32) is the only parameter: the weights noised per cycle.  The result
// does not depend on it; a beat takes 32 / Lanes cycles.  Other values stop elaboration.
module niu #(
  parameter int Lanes = niu_constants_pkg::NIU_LANES_DEFAULT
) (
  input  logic                                                clk_i,
  input  logic                                                rst_ni,
  // AXI4-Lite control slave.
  input  logic                                                s_axil_aw_valid_i,
  output logic                                                s_axil_aw_ready_o,
  input  logic [niu_constants_pkg::NIU_AXIL_ADDR_BITS-1:0]    s_axil_aw_addr_i,
  input  logic [niu_constants_pkg::NIU_AXIL_PROT_BITS-1:0]    s_axil_aw_prot_i,
  input  logic                                                s_axil_w_valid_i,
  output logic                                                s_axil_w_ready_o,
  input  logic [niu_constants_pkg::NIU_AXIL_DATA_BITS-1:0]    s_axil_w_data_i,
  input  logic [niu_constants_pkg::NIU_AXIL_STRB_BITS-1:0]    s_axil_w_strb_i,
  output logic                                                s_axil_b_valid_o,
  input  logic                                                s_axil_b_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_RESP_BITS-1:0]     s_axil_b_resp_o,
  input  logic                                                s_axil_ar_valid_i,
  output logic                                                s_axil_ar_ready_o,
  input  logic [niu_constants_pkg::NIU_AXIL_ADDR_BITS-1:0]    s_axil_ar_addr_i,
  input  logic [niu_constants_pkg::NIU_AXIL_PROT_BITS-1:0]    s_axil_ar_prot_i,
  output logic                                                s_axil_r_valid_o,
  input  logic                                                s_axil_r_ready_i,
  output logic [niu_constants_pkg::NIU_AXIL_DATA_BITS-1:0]    s_axil_r_data_o,
  output logic [niu_constants_pkg::NIU_AXI_RESP_BITS-1:0]     s_axil_r_resp_o,
  // AXI4 master: AR, R.
  output logic                                                axi_ar_valid_o,
  input  logic                                                axi_ar_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_ADDR_BITS-1:0]     axi_ar_addr_o,
  output logic [niu_constants_pkg::NIU_AXI_LEN_BITS-1:0]      axi_ar_len_o,
  output logic [niu_constants_pkg::NIU_AXI_SIZE_BITS-1:0]     axi_ar_size_o,
  output logic [niu_constants_pkg::NIU_AXI_BURST_BITS-1:0]    axi_ar_burst_o,
  input  logic                                                axi_r_valid_i,
  output logic                                                axi_r_ready_o,
  input  logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0]     axi_r_data_i,
  input  logic [niu_constants_pkg::NIU_AXI_RESP_BITS-1:0]     axi_r_resp_i,
  input  logic                                                axi_r_last_i,
  // AXI4 master: AW, W, B.
  output logic                                                axi_aw_valid_o,
  input  logic                                                axi_aw_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_ADDR_BITS-1:0]     axi_aw_addr_o,
  output logic [niu_constants_pkg::NIU_AXI_LEN_BITS-1:0]      axi_aw_len_o,
  output logic [niu_constants_pkg::NIU_AXI_SIZE_BITS-1:0]     axi_aw_size_o,
  output logic [niu_constants_pkg::NIU_AXI_BURST_BITS-1:0]    axi_aw_burst_o,
  output logic                                                axi_w_valid_o,
  input  logic                                                axi_w_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_DATA_BITS-1:0]     axi_w_data_o,
  output logic [niu_constants_pkg::NIU_AXI_STRB_BITS-1:0]     axi_w_strb_o,
  output logic                                                axi_w_last_o,
  input  logic                                                axi_b_valid_i,
  output logic                                                axi_b_ready_o,
  input  logic [niu_constants_pkg::NIU_AXI_RESP_BITS-1:0]     axi_b_resp_i
);

  localparam int AddrBits   = niu_constants_pkg::NIU_AXI_ADDR_BITS;
  localparam int DataBits   = niu_constants_pkg::NIU_AXI_DATA_BITS;
  localparam int WordBits   = niu_constants_pkg::NIU_WORD_BITS;
  localparam int DWordBits  = 2 * WordBits;
  localparam int XferBits   = niu_constants_pkg::NIU_XFER_BITS;
  localparam int BeatShift  = niu_constants_pkg::NIU_AXI_BEAT_SHIFT;
  localparam int BeatCntW   = XferBits - BeatShift + 1;
  localparam int LenBits    = niu_constants_pkg::NIU_AXI_LEN_BITS;
  localparam int IndexBits  = niu_constants_pkg::NIU_WORD_INDEX_BITS;
  localparam int LayerWords = niu_constants_pkg::NIU_LAYER_WORDS;
  localparam int WordsBeat  = niu_constants_pkg::NIU_WORDS_PER_BEAT;
  localparam int BlockBeats = LayerWords / WordsBeat;
  localparam int HeaderBeats = niu_constants_pkg::NIU_PROG_HEADER_WORDS / WordsBeat;
  localparam int WordShift  = $clog2(WordBits / niu_constants_pkg::NIU_CODE_BITS);  // bytes per word
  localparam int ErrBits    = niu_constants_pkg::NIU_STATUS_ERROR_BITS;
  localparam int CountBits  = niu_constants_pkg::NIU_LAYER_COUNT_BITS;
  localparam int CntBits    = niu_constants_pkg::NIU_COUNTER_BITS;
  localparam int CodeBits   = niu_constants_pkg::NIU_CODE_BITS;
  localparam int GroupBits  = Lanes * CodeBits;

  // Every layer block starts on a beat: PROG_ADDR is beat-aligned (checked at CTRL.start) and the
  // header and every block are whole beats, so a block is read as whole beats from its first word.
  // rtl/niu_gen.py refuses other sizes; this repeats the check where the assumption is made
  // (Icarus 11 has no elaboration-time $error; Verilator and Yosys make it).
`ifndef __ICARUS__
  if (niu_constants_pkg::NIU_PROG_HEADER_WORDS % WordsBeat != 0 || LayerWords % WordsBeat != 0) begin : g_block_align
    $error("NIU_PROG_HEADER_WORDS and NIU_LAYER_WORDS must be multiples of NIU_WORDS_PER_BEAT");
  end
  // A beat's 32 weights are processed as groups of Lanes (niu_beat_split.sv, niu_beat_join.sv): a
  // lane count that does not divide the beat would drop the weights of the last partial group.
  // The same rule as rtl/niu_gen.py's LANES_SUPPORTED and niu_model.cpp's check_lanes().
  if (Lanes < 1 || niu_constants_pkg::NIU_BEAT_LANES % Lanes != 0) begin : g_lanes_divide_beat
    $error("Lanes must divide NIU_BEAT_LANES (the weights of a beat)");
  end
  // StHeader reads the header as one beat and takes its fields from that beat.
  if (HeaderBeats != 1) begin : g_header_beat
    $error("NIU_PROG_HEADER_WORDS must be one beat (NIU_WORDS_PER_BEAT words)");
  end
`endif

  // ---------------------------------------------------------------- control registers
  logic                 start;
  logic [DWordBits-1:0] prog_addr;
  logic [LenBits-1:0]   max_len;
  logic                 busy, done_set;
  logic [ErrBits-1:0]   error_d, error_q;
  logic [CountBits-1:0] layers_done_d, layers_done_q;
  logic [CntBits-1:0]   stream_cycles_q, stream_beats_q;

  niu_axil_regs #(.Lanes(Lanes)) u_regs (
    .clk_i, .rst_ni,
    .s_aw_valid_i (s_axil_aw_valid_i), .s_aw_ready_o (s_axil_aw_ready_o), .s_aw_addr_i (s_axil_aw_addr_i),
    .s_aw_prot_i  (s_axil_aw_prot_i),
    .s_w_valid_i  (s_axil_w_valid_i),  .s_w_ready_o  (s_axil_w_ready_o),  .s_w_data_i  (s_axil_w_data_i),
    .s_w_strb_i   (s_axil_w_strb_i),
    .s_b_valid_o  (s_axil_b_valid_o),  .s_b_ready_i  (s_axil_b_ready_i),  .s_b_resp_o  (s_axil_b_resp_o),
    .s_ar_valid_i (s_axil_ar_valid_i), .s_ar_ready_o (s_axil_ar_ready_o), .s_ar_addr_i (s_axil_ar_addr_i),
    .s_ar_prot_i  (s_axil_ar_prot_i),
    .s_r_valid_o  (s_axil_r_valid_o),  .s_r_ready_i  (s_axil_r_ready_i),  .s_r_data_o  (s_axil_r_data_o),
    .s_r_resp_o   (s_axil_r_resp_o),
    .start_o        (start),
    .prog_addr_o    (prog_addr),
    .max_len_o      (max_len),
    .busy_i         (busy),
    .done_set_i     (done_set),
    .error_i        (error_q),
    .layers_done_i  (layers_done_q),
    .stream_cycles_i(stream_cycles_q),
    .stream_beats_i (stream_beats_q)
  );

  // ---------------------------------------------------------------- controller state
  // Plain constants, not an enum: Icarus 11 crashes on a package enum used as a variable type.
  localparam int NumStates = 5;
  localparam int StateBits = $clog2(NumStates);
  localparam logic [StateBits-1:0] StIdle   = StateBits'(0);  // waiting for CTRL.start
  localparam logic [StateBits-1:0] StHeader = StateBits'(1);  // reading the program header
  localparam logic [StateBits-1:0] StBlock  = StateBits'(2);  // reading one layer block
  localparam logic [StateBits-1:0] StCheck  = StateBits'(3);  // validating the layer's fields
  localparam logic [StateBits-1:0] StStream = StateBits'(4);  // streaming the layer's weights
  logic [StateBits-1:0] state_d, state_q;
  logic                 phase_start_d, phase_start_q;  // first cycle of HEADER / BLOCK / STREAM
  logic [DWordBits-1:0] block_addr_d, block_addr_q;    // byte address of the next layer block
  logic [WordBits-1:0]  num_layers_q;
  logic                 header_ok_q;

  // Fields of the current layer block (from the loader).
  logic [DWordBits-1:0] src_addr, dst_addr;
  logic [WordBits-1:0]  count, out_bits, back_k, drift_lt;

  // ---------------------------------------------------------------- read engine
  logic                rd_done, rd_error;
  logic [BeatCntW-1:0] rd_error_beats_left;  // where in the transfer the first read error came
  logic [AddrBits-1:0] rd_addr;
  logic [BeatCntW-1:0] rd_beats;
  logic                rd_beat_valid, rd_beat_ready, rd_beat_last;
  logic [DataBits-1:0] rd_beat_data;

  always_comb begin
    rd_addr  = '0;
    rd_beats = '0;
    unique case (state_q)
      StHeader: begin
        rd_addr  = AddrBits'(prog_addr);
        rd_beats = BeatCntW'(HeaderBeats);
      end
      StBlock: begin
        rd_addr  = AddrBits'(block_addr_q);
        rd_beats = BeatCntW'(BlockBeats);
      end
      default: begin  // StStream (and unused otherwise)
        rd_addr  = AddrBits'(src_addr);
        rd_beats = BeatCntW'(count >> BeatShift) + BeatCntW'(count[BeatShift-1:0] != '0);
      end
    endcase
  end

  niu_axi_rd u_rd (
    .clk_i, .rst_ni,
    .start_i      (phase_start_q),
    .addr_i       (rd_addr),
    .beats_i      (rd_beats),
    .max_len_i    (max_len),
    .done_o       (rd_done),
    .error_o      (rd_error),
    .error_beats_left_o (rd_error_beats_left),
    .ar_valid_o   (axi_ar_valid_o),
    .ar_ready_i   (axi_ar_ready_i),
    .ar_addr_o    (axi_ar_addr_o),
    .ar_len_o     (axi_ar_len_o),
    .ar_size_o    (axi_ar_size_o),
    .ar_burst_o   (axi_ar_burst_o),
    .r_valid_i    (axi_r_valid_i),
    .r_ready_o    (axi_r_ready_o),
    .r_data_i     (axi_r_data_i),
    .r_resp_i     (axi_r_resp_i),
    .beat_valid_o (rd_beat_valid),
    .beat_ready_i (rd_beat_ready),
    .beat_data_o  (rd_beat_data),
    .beat_last_o  (rd_beat_last)
  );

  // ---------------------------------------------------------------- program words
  logic                 streaming;
  logic                 word_valid;
  logic [WordBits-1:0]  word;
  logic [IndexBits-1:0] word_index;
  logic                 unpack_ready;
  assign streaming = (state_q == StStream);

  niu_word_unpack u_unpack (
    .clk_i, .rst_ni,
    .start_i      (phase_start_q && !streaming),
    .beat_valid_i (rd_beat_valid && !streaming),
    .beat_ready_o (unpack_ready),
    .beat_data_i  (rd_beat_data),
    .word_valid_o (word_valid),
    .word_o       (word),
    .word_index_o (word_index)
  );

  // Header words: magic, version, number of layers, words per layer.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      num_layers_q <= '0;
      header_ok_q  <= 1'b0;
    end else if (state_q == StHeader && word_valid) begin
      if (word_index == IndexBits'(niu_constants_pkg::NIU_PROG_MAGIC))
        header_ok_q <= (word == WordBits'(niu_constants_pkg::NIU_PROG_MAGIC_VALUE));
      if (word_index == IndexBits'(niu_constants_pkg::NIU_PROG_VERSION) &&
          word != WordBits'(niu_constants_pkg::NIU_PROG_VERSION_VALUE))
        header_ok_q <= 1'b0;
      if (word_index == IndexBits'(niu_constants_pkg::NIU_PROG_LAYER_WORDS) && word != WordBits'(LayerWords))
        header_ok_q <= 1'b0;
      if (word_index == IndexBits'(niu_constants_pkg::NIU_PROG_NUM_LAYERS)) begin
        num_layers_q <= word;
        // LAYERS_DONE counts in CountBits bits: it could never reach a larger layer count.
        if (word >> CountBits != '0) header_ok_q <= 1'b0;
      end
    end
  end

  // ---------------------------------------------------------------- layer block loader
  logic [niu_constants_pkg::NIU_G_BITS-1:0]            gt0;
  logic [niu_constants_pkg::NIU_SP_BITS-1:0]           sp0;
  logic [niu_constants_pkg::NIU_NU_BITS-1:0]           mu0, sn0;
  logic [Lanes*niu_constants_pkg::NIU_RNG_GENS-1:0]    rng_load;
  logic [niu_constants_pkg::NIU_RNG_STATE_BITS-1:0]    rng_state;
  logic                                                code_we, rt_we;
  logic                                                read_table_ok;
  logic [niu_constants_pkg::NIU_CODE_INDEX_BITS-1:0]   code_waddr;
  logic [2*(niu_constants_pkg::NIU_G_BITS+niu_constants_pkg::NIU_NU_BITS)-1:0] code_wdata;
  logic [niu_constants_pkg::NIU_RT_ADDR_BITS-1:0]      rt_waddr;
  logic [WordBits-1:0]                                 table_wdata;

  niu_loader #(.Lanes(Lanes)) u_loader (
    .clk_i, .rst_ni,
    .clear_i       (phase_start_q),
    .word_valid_i  (word_valid && state_q == StBlock),
    .word_i        (word),
    .word_index_i  (word_index),
    .src_addr_o    (src_addr),
    .dst_addr_o    (dst_addr),
    .count_o       (count),
    .out_bits_o    (out_bits),
    .back_k_o      (back_k),
    .drift_lt_o    (drift_lt),
    .gt0_o         (gt0),
    .sp0_o         (sp0),
    .mu0_o         (mu0),
    .sn0_o         (sn0),
    .rng_load_o    (rng_load),
    .rng_state_o   (rng_state),
    .code_we_o     (code_we),
    .code_waddr_o  (code_waddr),
    .code_wdata_o  (code_wdata),
    .rt_we_o       (rt_we),
    .rt_waddr_o    (rt_waddr),
    .table_wdata_o (table_wdata),
    .read_table_ok_o (read_table_ok)
  );

  // ---------------------------------------------------------------- split -> noise pipeline -> join
  logic                 group_in_valid, group_in_ready, group_out_valid, group_out_ready;
  logic [GroupBits-1:0] group_in_data, group_out_data;
  logic                 split_ready;

  niu_beat_split #(.Lanes(Lanes)) u_split (
    .clk_i, .rst_ni,
    .clear_i       (phase_start_q),
    .in_valid_i    (rd_beat_valid && streaming),
    .in_ready_o    (split_ready),
    .in_data_i     (rd_beat_data),
    .group_valid_o (group_in_valid),
    .group_ready_i (group_in_ready),
    .group_data_o  (group_in_data)
  );

  niu_noise_pipe #(.Lanes(Lanes)) u_pipe (
    .clk_i, .rst_ni,
    .clear_i       (phase_start_q && streaming),
    .in_valid_i    (group_in_valid),
    .in_ready_o    (group_in_ready),
    .in_data_i     (group_in_data),
    .out_valid_o   (group_out_valid),
    .out_ready_i   (group_out_ready),
    .out_data_o    (group_out_data),
    .lt_i          (drift_lt[niu_constants_pkg::NIU_LT_BITS-1:0]),
    .back_k_i      (back_k[niu_constants_pkg::NIU_K_BITS-1:0]),
    .out_bits_i    (out_bits[niu_constants_pkg::NIU_OUT_BITS_FIELD-1:0]),
    .gt0_i         (gt0),
    .sp0_i         (sp0),
    .mu0_i         (mu0),
    .sn0_i         (sn0),
    .rng_load_i    (rng_load),
    .rng_state_i   (rng_state),
    .code_we_i     (code_we),
    .code_waddr_i  (code_waddr),
    .code_wdata_i  (code_wdata),
    .rt_we_i       (rt_we),
    .rt_waddr_i    (rt_waddr),
    .table_wdata_i (table_wdata)
  );

  assign rd_beat_ready = streaming ? split_ready : unpack_ready;

  logic                join_valid, skid_ready;
  logic [DataBits-1:0] join_data;
  niu_beat_join #(.Lanes(Lanes)) u_join (
    .clk_i, .rst_ni,
    .clear_i       (phase_start_q),
    .group_valid_i (group_out_valid),
    .group_ready_o (group_out_ready),
    .group_data_i  (group_out_data),
    .out_valid_o   (join_valid),
    .out_ready_i   (skid_ready),
    .out_data_o    (join_data)
  );

  logic                wr_in_valid, wr_in_ready;
  logic [DataBits-1:0] wr_in_data;
  niu_skid #(.Width(DataBits)) u_out_skid (
    .clk_i, .rst_ni,
    .clear_i (1'b0),
    .valid_i (join_valid),
    .ready_o (skid_ready),
    .data_i  (join_data),
    .valid_o (wr_in_valid),
    .ready_i (wr_in_ready),
    .data_o  (wr_in_data)
  );

  // ---------------------------------------------------------------- write engine
  logic wr_done, wr_error;
  niu_axi_wr u_wr (
    .clk_i, .rst_ni,
    .start_i      (phase_start_q && streaming),
    .addr_i       (AddrBits'(dst_addr)),
    .len_bytes_i  (count),
    .max_len_i    (max_len),
    .done_o       (wr_done),
    .error_o      (wr_error),
    .read_error_i (rd_error),
    .read_error_beats_left_i (rd_error_beats_left),
    .beat_valid_i (wr_in_valid),
    .beat_ready_o (wr_in_ready),
    .beat_data_i  (wr_in_data),
    .aw_valid_o   (axi_aw_valid_o),
    .aw_ready_i   (axi_aw_ready_i),
    .aw_addr_o    (axi_aw_addr_o),
    .aw_len_o     (axi_aw_len_o),
    .aw_size_o    (axi_aw_size_o),
    .aw_burst_o   (axi_aw_burst_o),
    .w_valid_o    (axi_w_valid_o),
    .w_ready_i    (axi_w_ready_i),
    .w_data_o     (axi_w_data_o),
    .w_strb_o     (axi_w_strb_o),
    .w_last_o     (axi_w_last_o),
    .b_valid_i    (axi_b_valid_i),
    .b_ready_o    (axi_b_ready_o),
    .b_resp_i     (axi_b_resp_i)
  );

  // ---------------------------------------------------------------- controller
  // A phase is over once its engines report done; done is only meaningful after the phase's
  // start cycle (the engines sample their descriptor on it).
  logic words_done, stream_done, layer_fields_ok, addresses_ok, addr_range_ok;
  assign words_done  = !phase_start_q && rd_done && !word_valid;
  assign stream_done = !phase_start_q && rd_done && wr_done;
  assign layer_fields_ok = (out_bits >= WordBits'(niu_constants_pkg::NIU_OUT_BITS_MIN))
                        && (out_bits <= WordBits'(niu_constants_pkg::NIU_OUT_BITS_MAX))
                        && (back_k >> niu_constants_pkg::NIU_K_BITS == '0)
                        && (drift_lt >> niu_constants_pkg::NIU_LT_BITS == '0)
                        && read_table_ok;
  assign addresses_ok    = (src_addr[BeatShift-1:0] == '0) && (dst_addr[BeatShift-1:0] == '0);
  // Ends too, not only starts: a burst past the top of the address space would wrap to 0.
  logic [DWordBits-1:0] src_end, dst_end;  // first byte after the layer's source / destination
  assign src_end       = src_addr + DWordBits'(count);
  assign dst_end       = dst_addr + DWordBits'(count);
  assign addr_range_ok = (src_addr >> AddrBits == '0) && (dst_addr >> AddrBits == '0)
                      && (src_end >> AddrBits == '0) && (dst_end >> AddrBits == '0)
                      && (block_addr_q >> AddrBits == '0);

  assign busy = (state_q != StIdle);

  // Whether the layer block at `addr` ends below the top of the address space.  Checked before
  // the block is read: a block read past the top would wrap to address 0 and run on words from
  // there (the start is also checked with the layer's fields, but only after the read).
  // (The result is assigned to the function's name: Yosys 0.23 cannot parse `return <expr> == ...`.)
  function automatic logic block_fits(logic [DWordBits-1:0] addr);
    logic [DWordBits-1:0] block_end;
    block_end  = addr + (DWordBits'(LayerWords) << WordShift);
    block_fits = (block_end >> AddrBits) == '0;
  endfunction

  always_comb begin
    state_d       = state_q;
    phase_start_d = 1'b0;
    block_addr_d  = block_addr_q;
    layers_done_d = layers_done_q;
    error_d       = error_q;
    done_set      = 1'b0;
    unique case (state_q)
      StIdle: begin
        if (start) begin
          error_d       = ErrBits'(niu_constants_pkg::NIU_ERR_NONE);
          layers_done_d = '0;
          block_addr_d  = prog_addr + (DWordBits'(niu_constants_pkg::NIU_PROG_HEADER_WORDS) << WordShift);
          if (prog_addr[BeatShift-1:0] != '0) begin
            error_d  = ErrBits'(niu_constants_pkg::NIU_ERR_ALIGNMENT);
            done_set = 1'b1;
          end else if (prog_addr >> AddrBits != '0) begin
            error_d  = ErrBits'(niu_constants_pkg::NIU_ERR_ADDR_RANGE);
            done_set = 1'b1;
          end else begin
            state_d       = StHeader;
            phase_start_d = 1'b1;
          end
        end
      end
      StHeader: begin
        if (words_done) begin
          if (rd_error) begin
            error_d = ErrBits'(niu_constants_pkg::NIU_ERR_READ_RESP);
          end else if (!header_ok_q) begin
            error_d = ErrBits'(niu_constants_pkg::NIU_ERR_BAD_HEADER);
          end
          if (rd_error || !header_ok_q || num_layers_q == '0) begin
            state_d  = StIdle;
            done_set = 1'b1;
          end else if (!block_fits(block_addr_q)) begin
            error_d  = ErrBits'(niu_constants_pkg::NIU_ERR_ADDR_RANGE);
            state_d  = StIdle;
            done_set = 1'b1;
          end else begin
            state_d       = StBlock;
            phase_start_d = 1'b1;
          end
        end
      end
      StBlock: begin
        if (words_done) state_d = StCheck;
      end
      StCheck: begin
        if (rd_error) begin
          error_d = ErrBits'(niu_constants_pkg::NIU_ERR_READ_RESP);
        end else if (!layer_fields_ok) begin
          error_d = ErrBits'(niu_constants_pkg::NIU_ERR_BAD_LAYER);
        end else if (!addresses_ok) begin
          error_d = ErrBits'(niu_constants_pkg::NIU_ERR_ALIGNMENT);
        end else if (!addr_range_ok) begin
          error_d = ErrBits'(niu_constants_pkg::NIU_ERR_ADDR_RANGE);
        end
        if (rd_error || !layer_fields_ok || !addresses_ok || !addr_range_ok) begin
          state_d  = StIdle;
          done_set = 1'b1;
        end else begin
          state_d       = StStream;
          phase_start_d = 1'b1;
        end
      end
      StStream: begin
        if (stream_done) begin
          // LAYERS_DONE counts the layers whose weights are in place: a layer whose stream saw an
          // error response (an R beat or a B) is not one, so it is not counted.
          if (!rd_error && !wr_error) layers_done_d = layers_done_q + 1'b1;
          block_addr_d  = block_addr_q + (DWordBits'(LayerWords) << WordShift);
          if (rd_error || wr_error) begin
            error_d  = rd_error ? ErrBits'(niu_constants_pkg::NIU_ERR_READ_RESP)
                                : ErrBits'(niu_constants_pkg::NIU_ERR_WRITE_RESP);
            state_d  = StIdle;
            done_set = 1'b1;
          end else if (WordBits'(layers_done_d) == num_layers_q) begin
            state_d  = StIdle;
            done_set = 1'b1;
          end else if (!block_fits(block_addr_d)) begin
            error_d  = ErrBits'(niu_constants_pkg::NIU_ERR_ADDR_RANGE);
            state_d  = StIdle;
            done_set = 1'b1;
          end else begin
            state_d       = StBlock;
            phase_start_d = 1'b1;
          end
        end
      end
      default: state_d = StIdle;
    endcase
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q         <= StIdle;
      phase_start_q   <= 1'b0;
      block_addr_q    <= '0;
      layers_done_q   <= '0;
      error_q         <= ErrBits'(niu_constants_pkg::NIU_ERR_NONE);
      stream_cycles_q <= '0;
      stream_beats_q  <= '0;
    end else begin
      state_q       <= state_d;
      phase_start_q <= phase_start_d;
      block_addr_q  <= block_addr_d;
      layers_done_q <= layers_done_d;
      error_q       <= error_d;
      if (start) begin
        stream_cycles_q <= '0;
        stream_beats_q  <= '0;
      end else if (streaming) begin
        stream_cycles_q <= stream_cycles_q + 1'b1;
        if (rd_beat_valid && split_ready) stream_beats_q <= stream_beats_q + 1'b1;
      end
    end
  end

endmodule
