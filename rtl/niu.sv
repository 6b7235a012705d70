// NIU top level: register port, program loader, AXI4 read engine -> noise pipeline -> AXI4 write
// engine (docs/niu_rtl.md).  One AXI4 master port of 256 bits, like the PU the NIU replaces.
//
// A run executes a whole NIU program (docs/niu_datapath.md section 5) from HBM: the header, then
// for each layer its block (tables, RNG sub-states, addresses) and then the layer's weights,
// streamed from SRC_ADDR through the noise pipeline to DST_ADDR.  The host writes PROG_ADDR and
// CTRL.start and polls STATUS.done.
module niu (
  input  logic         clk_i,
  input  logic         rst_ni,
  // Register port.
  input  logic         reg_valid_i,
  input  logic         reg_write_i,
  input  logic [5:0]   reg_addr_i,
  input  logic [31:0]  reg_wdata_i,
  output logic [31:0]  reg_rdata_o,
  // AXI4 master: AR, R.
  output logic                           axi_ar_valid_o,
  input  logic                           axi_ar_ready_i,
  output logic [niu_axi_pkg::AddrW-1:0]  axi_ar_addr_o,
  output logic [7:0]                     axi_ar_len_o,
  output logic [2:0]                     axi_ar_size_o,
  output logic [1:0]                     axi_ar_burst_o,
  input  logic                           axi_r_valid_i,
  output logic                           axi_r_ready_o,
  input  logic [255:0]                   axi_r_data_i,
  input  logic [1:0]                     axi_r_resp_i,
  input  logic                           axi_r_last_i,
  // AXI4 master: AW, W, B.
  output logic                           axi_aw_valid_o,
  input  logic                           axi_aw_ready_i,
  output logic [niu_axi_pkg::AddrW-1:0]  axi_aw_addr_o,
  output logic [7:0]                     axi_aw_len_o,
  output logic [2:0]                     axi_aw_size_o,
  output logic [1:0]                     axi_aw_burst_o,
  output logic                           axi_w_valid_o,
  input  logic                           axi_w_ready_i,
  output logic [255:0]                   axi_w_data_o,
  output logic [31:0]                    axi_w_strb_o,
  output logic                           axi_w_last_o,
  input  logic                           axi_b_valid_i,
  output logic                           axi_b_ready_o,
  input  logic [1:0]                     axi_b_resp_i
);

  localparam int AddrW      = niu_axi_pkg::AddrW;
  localparam int BeatCntW   = niu_axi_pkg::BeatCntW;
  localparam int LayerWords = niu_constants_pkg::NIU_LAYER_WORDS;

  // ---------------------------------------------------------------- registers
  logic        start;
  logic [63:0] prog_addr;
  logic [7:0]  max_len;
  logic        busy, done_set;
  logic [3:0]  error_d, error_q;
  logic [15:0] layers_done_d, layers_done_q;
  logic [31:0] stream_cycles_q, stream_beats_q;

  niu_regs u_regs (
    .clk_i, .rst_ni,
    .reg_valid_i, .reg_write_i, .reg_addr_i, .reg_wdata_i, .reg_rdata_o,
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
  // Plain constants, not an enum: Icarus 11 crashes on a package enum used as a variable type
  // and rejects some assignments of a local one.
  localparam logic [2:0] StIdle   = 3'd0;  // waiting for CTRL.start
  localparam logic [2:0] StHeader = 3'd1;  // reading the program header
  localparam logic [2:0] StBlock  = 3'd2;  // reading one layer block into tables and RNG units
  localparam logic [2:0] StCheck  = 3'd3;  // validating the layer's fields
  localparam logic [2:0] StStream = 3'd4;  // streaming the layer's weights through the noise pipeline
  logic [2:0] state_d, state_q;
  logic        phase_start_d, phase_start_q;  // first cycle of HEADER / LOAD / STREAM
  logic [63:0] block_addr_d, block_addr_q;    // byte address of the next layer block
  logic [31:0] num_layers_q;
  logic        header_ok_q;

  // Fields of the current layer block (from the loader).
  logic [63:0] src_addr, dst_addr, chip_jump_c, read_jump_c;
  logic [31:0] count, out_bits, back_k;

  // ---------------------------------------------------------------- read engine
  logic                 rd_done, rd_error;
  logic [AddrW-1:0]     rd_addr;
  logic [BeatCntW-1:0]  rd_beats;
  logic                 rd_beat_valid, rd_beat_ready, rd_beat_last;
  logic [255:0]         rd_beat_data;
  logic [2:0]           block_skip;  // words before the block in its first beat

  assign block_skip = block_addr_q[4:2];

  always_comb begin
    rd_addr  = '0;
    rd_beats = '0;
    unique case (state_q)
      StHeader: begin
        rd_addr  = AddrW'(prog_addr);
        rd_beats = BeatCntW'(1);
      end
      StBlock: begin
        rd_addr  = AddrW'({block_addr_q[63:5], 5'd0});
        rd_beats = BeatCntW'((32'(block_skip) + 32'(LayerWords) + 32'd7) >> 3);
      end
      default: begin  // StStream (and unused otherwise)
        rd_addr  = AddrW'(src_addr);
        rd_beats = BeatCntW'((count >> 5) + 32'(count[4:0] != '0));
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
  logic        streaming;
  logic        word_valid;
  logic [31:0] word;
  logic [15:0] word_index;
  logic        unpack_ready;
  assign streaming = (state_q == StStream);

  niu_word_unpack u_unpack (
    .clk_i, .rst_ni,
    .start_i      (phase_start_q && !streaming),
    .skip_i       ((state_q == StBlock) ? block_skip : 3'd0),
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
      if (word_index == 16'(niu_constants_pkg::NIU_PROG_MAGIC))
        header_ok_q <= (word == 32'(niu_constants_pkg::NIU_PROG_MAGIC_VALUE));
      if (word_index == 16'(niu_constants_pkg::NIU_PROG_VERSION) &&
          word != 32'(niu_constants_pkg::NIU_PROG_VERSION_VALUE))
        header_ok_q <= 1'b0;
      if (word_index == 16'(niu_constants_pkg::NIU_PROG_LAYER_WORDS) && word != 32'(LayerWords))
        header_ok_q <= 1'b0;
      if (word_index == 16'(niu_constants_pkg::NIU_PROG_NUM_LAYERS))
        num_layers_q <= word;
    end
  end

  // ---------------------------------------------------------------- layer block loader
  logic [16:0] gt0, sp0, sn0;
  logic [17:0] mu0;
  logic [niu_constants_pkg::NIU_CHIP_SLOTS-1:0] chip_load;
  logic [niu_constants_pkg::NIU_READ_SLOTS-1:0] read_load;
  logic [63:0] load_state;
  logic        gt_we, sp_we, mu_we, sn_we, df_we, rt_we;
  logic [8:0]  table_waddr;
  logic [17:0] table_wdata;

  niu_loader u_loader (
    .clk_i, .rst_ni,
    .word_valid_i  (word_valid && state_q == StBlock),
    .word_i        (word),
    .word_index_i  (word_index),
    .src_addr_o    (src_addr),
    .dst_addr_o    (dst_addr),
    .count_o       (count),
    .out_bits_o    (out_bits),
    .back_k_o      (back_k),
    .chip_jump_c_o (chip_jump_c),
    .read_jump_c_o (read_jump_c),
    .gt0_o         (gt0),
    .sp0_o         (sp0),
    .mu0_o         (mu0),
    .sn0_o         (sn0),
    .chip_load_o   (chip_load),
    .read_load_o   (read_load),
    .load_state_o  (load_state),
    .gt_we_o       (gt_we),
    .sp_we_o       (sp_we),
    .mu_we_o       (mu_we),
    .sn_we_o       (sn_we),
    .df_we_o       (df_we),
    .rt_we_o       (rt_we),
    .table_waddr_o (table_waddr),
    .table_wdata_o (table_wdata)
  );

  // ---------------------------------------------------------------- noise pipeline
  logic         pipe_in_ready, pipe_out_valid, pipe_out_ready;
  logic [255:0] pipe_out_data;
  logic         wr_in_valid, wr_in_ready;
  logic [255:0] wr_in_data;
  logic         skid_ready;

  niu_noise_pipe u_pipe (
    .clk_i, .rst_ni,
    .clear_i       (phase_start_q && streaming),
    .in_valid_i    (rd_beat_valid && streaming),
    .in_ready_o    (pipe_in_ready),
    .in_data_i     (rd_beat_data),
    .out_valid_o   (pipe_out_valid),
    .out_ready_i   (pipe_out_ready),
    .out_data_o    (pipe_out_data),
    .chip_jump_c_i (chip_jump_c),
    .read_jump_c_i (read_jump_c),
    .back_k_i      (back_k[17:0]),
    .out_bits_i    (out_bits[3:0]),
    .gt0_i         (gt0),
    .sp0_i         (sp0),
    .mu0_i         (mu0),
    .sn0_i         (sn0),
    .chip_load_i   (chip_load),
    .read_load_i   (read_load),
    .load_state_i  (load_state),
    .gt_we_i       (gt_we),
    .sp_we_i       (sp_we),
    .mu_we_i       (mu_we),
    .sn_we_i       (sn_we),
    .df_we_i       (df_we),
    .rt_we_i       (rt_we),
    .table_waddr_i (table_waddr),
    .table_wdata_i (table_wdata)
  );

  assign rd_beat_ready  = streaming ? pipe_in_ready : unpack_ready;
  assign pipe_out_ready = skid_ready;

  niu_skid #(.Width(256)) u_out_skid (
    .clk_i, .rst_ni,
    .clear_i (1'b0),
    .valid_i (pipe_out_valid),
    .ready_o (skid_ready),
    .data_i  (pipe_out_data),
    .valid_o (wr_in_valid),
    .ready_i (wr_in_ready),
    .data_o  (wr_in_data)
  );

  // ---------------------------------------------------------------- write engine
  logic wr_done, wr_error;
  niu_axi_wr u_wr (
    .clk_i, .rst_ni,
    .start_i      (phase_start_q && streaming),
    .addr_i       (AddrW'(dst_addr)),
    .len_bytes_i  (count),
    .max_len_i    (max_len),
    .done_o       (wr_done),
    .error_o      (wr_error),
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
  logic words_done, stream_done, layer_fields_ok, addresses_ok;
  assign words_done  = !phase_start_q && rd_done && !word_valid;
  assign stream_done = !phase_start_q && rd_done && wr_done;
  assign layer_fields_ok = (out_bits >= 32'd2) && (out_bits <= 32'd8) && (back_k < 32'h40000);
  assign addresses_ok    = (src_addr[4:0] == '0) && (dst_addr[4:0] == '0);

  logic addr_range_ok;
  assign addr_range_ok = (src_addr[63:AddrW] == '0) && (dst_addr[63:AddrW] == '0)
                      && (block_addr_q[63:AddrW] == '0);

  assign busy = (state_q != StIdle);

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
          error_d       = niu_pkg::ErrNone;
          layers_done_d = '0;
          block_addr_d  = prog_addr + 64'(4 * niu_constants_pkg::NIU_PROG_HEADER_WORDS);
          if (prog_addr[4:0] != '0) begin
            error_d  = niu_pkg::ErrAlignment;
            done_set = 1'b1;
          end else if (prog_addr[63:AddrW] != '0) begin
            error_d  = niu_pkg::ErrAddrRange;
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
            error_d = niu_pkg::ErrReadResp;
          end else if (!header_ok_q) begin
            error_d = niu_pkg::ErrBadHeader;
          end
          if (rd_error || !header_ok_q || num_layers_q == '0) begin
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
          error_d = niu_pkg::ErrReadResp;
        end else if (!layer_fields_ok) begin
          error_d = niu_pkg::ErrBadLayer;
        end else if (!addresses_ok) begin
          error_d = niu_pkg::ErrAlignment;
        end else if (!addr_range_ok) begin
          error_d = niu_pkg::ErrAddrRange;
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
          layers_done_d = layers_done_q + 16'd1;
          block_addr_d  = block_addr_q + 64'(4 * LayerWords);
          if (rd_error || wr_error) begin
            error_d  = rd_error ? niu_pkg::ErrReadResp : niu_pkg::ErrWriteResp;
            state_d  = StIdle;
            done_set = 1'b1;
          end else if (32'(layers_done_d) == num_layers_q) begin
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
      error_q         <= niu_pkg::ErrNone;
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
        stream_cycles_q <= stream_cycles_q + 32'd1;
        if (rd_beat_valid && pipe_in_ready) stream_beats_q <= stream_beats_q + 32'd1;
      end
    end
  end

endmodule
