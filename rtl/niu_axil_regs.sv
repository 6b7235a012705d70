// The NIU's control port: an AXI4-Lite slave (what a Vivado block design connects to a processor)
// in front of the register file.  Register offsets, fields and error codes are generated
// (niu_constants_pkg NIU_REG_*, NIU_STATUS_*, NIU_ERR_*; docs/niu_generated.md).
//
// One transaction of each kind at a time: a write takes its address and data in either order
// (AWREADY/WREADY drop once captured), performs the write and answers on B; a read answers on R
// the cycle after AR.  Byte strobes apply to the read-write registers.  An address that names no
// register answers SLVERR (reads return 0).
module niu_axil_regs #(
  parameter int Lanes = niu_constants_pkg::NIU_LANES_DEFAULT
) (
  input  logic                                                clk_i,
  input  logic                                                rst_ni,
  // AXI4-Lite slave.
  input  logic                                                s_aw_valid_i,
  output logic                                                s_aw_ready_o,
  input  logic [niu_constants_pkg::NIU_AXIL_ADDR_BITS-1:0]    s_aw_addr_i,
  input  logic [niu_constants_pkg::NIU_AXIL_PROT_BITS-1:0]    s_aw_prot_i,
  input  logic                                                s_w_valid_i,
  output logic                                                s_w_ready_o,
  input  logic [niu_constants_pkg::NIU_AXIL_DATA_BITS-1:0]    s_w_data_i,
  input  logic [niu_constants_pkg::NIU_AXIL_STRB_BITS-1:0]    s_w_strb_i,
  output logic                                                s_b_valid_o,
  input  logic                                                s_b_ready_i,
  output logic [niu_constants_pkg::NIU_AXI_RESP_BITS-1:0]     s_b_resp_o,
  input  logic                                                s_ar_valid_i,
  output logic                                                s_ar_ready_o,
  input  logic [niu_constants_pkg::NIU_AXIL_ADDR_BITS-1:0]    s_ar_addr_i,
  input  logic [niu_constants_pkg::NIU_AXIL_PROT_BITS-1:0]    s_ar_prot_i,
  output logic                                                s_r_valid_o,
  input  logic                                                s_r_ready_i,
  output logic [niu_constants_pkg::NIU_AXIL_DATA_BITS-1:0]    s_r_data_o,
  output logic [niu_constants_pkg::NIU_AXI_RESP_BITS-1:0]     s_r_resp_o,
  // To the controller.
  output logic                                                start_o,
  output logic [2*niu_constants_pkg::NIU_AXIL_DATA_BITS-1:0]  prog_addr_o,
  output logic [niu_constants_pkg::NIU_AXI_LEN_BITS-1:0]      max_len_o,
  // From the controller.
  input  logic                                                busy_i,
  input  logic                                                done_set_i,
  input  logic [niu_constants_pkg::NIU_STATUS_ERROR_BITS-1:0] error_i,
  input  logic [niu_constants_pkg::NIU_LAYER_COUNT_BITS-1:0]  layers_done_i,
  input  logic [niu_constants_pkg::NIU_COUNTER_BITS-1:0]      stream_cycles_i,
  input  logic [niu_constants_pkg::NIU_COUNTER_BITS-1:0]      stream_beats_i
);

  localparam int AddrBits  = niu_constants_pkg::NIU_AXIL_ADDR_BITS;
  localparam int DataBits  = niu_constants_pkg::NIU_AXIL_DATA_BITS;
  localparam int StrbBits  = niu_constants_pkg::NIU_AXIL_STRB_BITS;
  localparam int RespBits  = niu_constants_pkg::NIU_AXI_RESP_BITS;
  localparam int LenBits   = niu_constants_pkg::NIU_AXI_LEN_BITS;
  localparam int ByteBits  = niu_constants_pkg::NIU_CODE_BITS;
  localparam int ErrLsb    = niu_constants_pkg::NIU_STATUS_ERROR_LSB;
  localparam int ErrBits   = niu_constants_pkg::NIU_STATUS_ERROR_BITS;
  localparam int LaneField = niu_constants_pkg::NIU_CODE_BITS;        // CONFIG: bits 7:0 lanes, 15:8 beat lanes
  localparam int HalfBits  = DataBits / 2;                            // CONFIG: bits 31:16 version
  localparam logic [RespBits-1:0] Okay   = RespBits'(niu_constants_pkg::NIU_AXI_RESP_OKAY);
  localparam logic [RespBits-1:0] SlvErr = RespBits'(niu_constants_pkg::NIU_AXI_RESP_SLVERR);

  localparam logic [AddrBits-1:0] RegCtrl      = AddrBits'(niu_constants_pkg::NIU_REG_CTRL);
  localparam logic [AddrBits-1:0] RegStatus    = AddrBits'(niu_constants_pkg::NIU_REG_STATUS);
  localparam logic [AddrBits-1:0] RegProgLo    = AddrBits'(niu_constants_pkg::NIU_REG_PROG_ADDR_LO);
  localparam logic [AddrBits-1:0] RegProgHi    = AddrBits'(niu_constants_pkg::NIU_REG_PROG_ADDR_HI);
  localparam logic [AddrBits-1:0] RegMaxBurst  = AddrBits'(niu_constants_pkg::NIU_REG_MAX_BURST);
  localparam logic [AddrBits-1:0] RegLayers    = AddrBits'(niu_constants_pkg::NIU_REG_LAYERS_DONE);
  localparam logic [AddrBits-1:0] RegCycles    = AddrBits'(niu_constants_pkg::NIU_REG_STREAM_CYCLES);
  localparam logic [AddrBits-1:0] RegBeats     = AddrBits'(niu_constants_pkg::NIU_REG_STREAM_BEATS);
  localparam logic [AddrBits-1:0] RegConfig    = AddrBits'(niu_constants_pkg::NIU_REG_CONFIG);
  localparam logic [AddrBits-1:0] RegId        = AddrBits'(niu_constants_pkg::NIU_REG_ID);

  function automatic logic known(input logic [AddrBits-1:0] a);
    known = (a == RegCtrl) || (a == RegStatus) || (a == RegProgLo) || (a == RegProgHi) || (a == RegMaxBurst)
         || (a == RegLayers) || (a == RegCycles) || (a == RegBeats) || (a == RegConfig) || (a == RegId);
  endfunction

  // Applies byte strobes to a register value.
  function automatic logic [DataBits-1:0] merge(input logic [DataBits-1:0] old, input logic [DataBits-1:0] data,
                                                input logic [StrbBits-1:0] strb);
    for (int b = 0; b < StrbBits; b++) begin
      merge[b*ByteBits +: ByteBits] = strb[b] ? data[b*ByteBits +: ByteBits] : old[b*ByteBits +: ByteBits];
    end
  endfunction

  // ---- Write channel: capture AW and W, then write and respond.
  logic                  aw_held_q, w_held_q;
  logic [AddrBits-1:0]   aw_addr_q;
  logic [DataBits-1:0]   w_data_q;
  logic [StrbBits-1:0]   w_strb_q;
  logic                  b_valid_q;
  logic [RespBits-1:0]   b_resp_q;

  assign s_aw_ready_o = !aw_held_q && !b_valid_q;
  assign s_w_ready_o  = !w_held_q && !b_valid_q;
  assign s_b_valid_o  = b_valid_q;
  assign s_b_resp_o   = b_resp_q;

  logic                do_write;
  logic [AddrBits-1:0] wr_addr;
  logic [DataBits-1:0] wr_data;
  logic [StrbBits-1:0] wr_strb;
  // The write happens once both halves are in (captured earlier or arriving now).
  assign wr_addr  = aw_held_q ? aw_addr_q : s_aw_addr_i;
  assign wr_data  = w_held_q ? w_data_q : s_w_data_i;
  assign wr_strb  = w_held_q ? w_strb_q : s_w_strb_i;
  assign do_write = (aw_held_q || (s_aw_valid_i && s_aw_ready_o)) && (w_held_q || (s_w_valid_i && s_w_ready_o));

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      aw_held_q <= 1'b0;
      w_held_q  <= 1'b0;
      aw_addr_q <= '0;
      w_data_q  <= '0;
      w_strb_q  <= '0;
      b_valid_q <= 1'b0;
      b_resp_q  <= Okay;
    end else begin
      if (do_write) begin
        aw_held_q <= 1'b0;
        w_held_q  <= 1'b0;
        b_valid_q <= 1'b1;
        b_resp_q  <= known(wr_addr) ? Okay : SlvErr;
      end else begin
        if (s_aw_valid_i && s_aw_ready_o) begin
          aw_held_q <= 1'b1;
          aw_addr_q <= s_aw_addr_i;
        end
        if (s_w_valid_i && s_w_ready_o) begin
          w_held_q <= 1'b1;
          w_data_q <= s_w_data_i;
          w_strb_q <= s_w_strb_i;
        end
        if (b_valid_q && s_b_ready_i) b_valid_q <= 1'b0;
      end
    end
  end

  // ---- Registers.
  logic done_q;
  assign start_o = do_write && (wr_addr == RegCtrl) && wr_strb[0] && wr_data[0] && !busy_i;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      prog_addr_o <= '0;
      max_len_o   <= LenBits'(niu_constants_pkg::NIU_MAX_BURST_DEFAULT);
      done_q      <= 1'b0;
    end else begin
      if (do_write && (wr_addr == RegProgLo))
        prog_addr_o[DataBits-1:0] <= merge(prog_addr_o[DataBits-1:0], wr_data, wr_strb);
      if (do_write && (wr_addr == RegProgHi))
        prog_addr_o[DataBits +: DataBits] <= merge(prog_addr_o[DataBits +: DataBits], wr_data, wr_strb);
      if (do_write && (wr_addr == RegMaxBurst) && wr_strb[0])
        max_len_o <= wr_data[LenBits-1:0];
      if (done_set_i) begin
        done_q <= 1'b1;
      end else if ((do_write && (wr_addr == RegStatus) && wr_strb[0]
                    && wr_data[niu_constants_pkg::NIU_STATUS_DONE_BIT]) || start_o) begin
        done_q <= 1'b0;
      end
    end
  end

  // ---- Read channel: one read at a time, answered the cycle after AR.
  logic                r_valid_q;
  logic [DataBits-1:0] r_data_q;
  logic [RespBits-1:0] r_resp_q;
  assign s_ar_ready_o = !r_valid_q;
  assign s_r_valid_o  = r_valid_q;
  assign s_r_data_o   = r_data_q;
  assign s_r_resp_o   = r_resp_q;

  logic [DataBits-1:0] status, config_word, read_value;
  always_comb begin
    status = '0;
    status[niu_constants_pkg::NIU_STATUS_BUSY_BIT] = busy_i;
    status[niu_constants_pkg::NIU_STATUS_DONE_BIT] = done_q;
    status[ErrLsb +: ErrBits] = error_i;
    config_word = {HalfBits'(niu_constants_pkg::NIU_PROG_VERSION_VALUE),
                   LaneField'(niu_constants_pkg::NIU_BEAT_LANES), LaneField'(Lanes)};
    read_value = '0;
    if ((s_ar_addr_i == RegStatus))        read_value = status;
    if ((s_ar_addr_i == RegProgLo))  read_value = prog_addr_o[DataBits-1:0];
    if ((s_ar_addr_i == RegProgHi))  read_value = prog_addr_o[DataBits +: DataBits];
    if ((s_ar_addr_i == RegMaxBurst))     read_value = DataBits'(max_len_o);
    if ((s_ar_addr_i == RegLayers))   read_value = DataBits'(layers_done_i);
    if ((s_ar_addr_i == RegCycles)) read_value = stream_cycles_i;
    if ((s_ar_addr_i == RegBeats))  read_value = stream_beats_i;
    if ((s_ar_addr_i == RegConfig))        read_value = config_word;
    if ((s_ar_addr_i == RegId))            read_value = DataBits'(niu_constants_pkg::NIU_PROG_MAGIC_VALUE);
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      r_valid_q <= 1'b0;
      r_data_q  <= '0;
      r_resp_q  <= Okay;
    end else if (s_ar_valid_i && s_ar_ready_o) begin
      r_valid_q <= 1'b1;
      r_data_q  <= read_value;
      r_resp_q  <= known(s_ar_addr_i) ? Okay : SlvErr;
    end else if (r_valid_q && s_r_ready_i) begin
      r_valid_q <= 1'b0;
    end
  end

endmodule
