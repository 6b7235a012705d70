// The noise pipeline: 32 lanes of niu_lane fed by 192 RNG units and their Gaussian converters.
//
// docs/niu_datapath.md section 4.2: chip unit u = 4*lane + j emits, per beat, j = 0: z1 of g+,
// 1: z1 of g-, 2: z2 of g+, 3: z2 of g-; read unit u = 2*lane + j emits z3 of g+ (j = 0) or g-.
//
// Flow control: the whole pipeline moves together (adv = the output stage is free).  A beat
// enters when in_valid_i and adv; only then do the RNG units emit and step (lock-step rule), so
// stalls and bubbles never change which draws a weight gets.  The output stage is a register;
// the caller puts a skid buffer after it so that out_ready_i is a register too.
module niu_noise_pipe (
  input  logic                          clk_i,
  input  logic                          rst_ni,
  input  logic                          clear_i,       // empty the pipeline (new layer)
  // Beat stream in.
  input  logic                          in_valid_i,
  output logic                          in_ready_o,
  input  logic [255:0]                  in_data_i,
  // Beat stream out.
  output logic                          out_valid_o,
  input  logic                          out_ready_i,
  output logic [255:0]                  out_data_o,
  // Layer constants.
  input  logic [63:0]                   chip_jump_c_i,
  input  logic [63:0]                   read_jump_c_i,
  input  logic [17:0]                   back_k_i,
  input  logic [3:0]                    out_bits_i,
  input  logic [16:0]                   gt0_i,
  input  logic [16:0]                   sp0_i,
  input  logic [17:0]                   mu0_i,
  input  logic [16:0]                   sn0_i,
  // Program load: RNG sub-states and table entries.
  input  logic [niu_constants_pkg::NIU_CHIP_SLOTS-1:0] chip_load_i,  // one-hot unit
  input  logic [niu_constants_pkg::NIU_READ_SLOTS-1:0] read_load_i,  // one-hot unit
  input  logic [63:0]                   load_state_i,
  input  logic                          gt_we_i,
  input  logic                          sp_we_i,
  input  logic                          mu_we_i,
  input  logic                          sn_we_i,
  input  logic                          df_we_i,
  input  logic                          rt_we_i,
  input  logic [8:0]                    table_waddr_i,
  input  logic [17:0]                   table_wdata_i
);

  localparam int Lanes     = niu_constants_pkg::NIU_LANES;
  localparam int ChipSlots = niu_constants_pkg::NIU_CHIP_SLOTS;
  localparam int ReadSlots = niu_constants_pkg::NIU_READ_SLOTS;
  localparam int Pipe      = niu_constants_pkg::NIU_RNG_PIPE;
  localparam int Stages    = 12;  // niu_lane's latency

  // ---- Flow control: one valid bit per stage; everything moves on adv.
  logic [Stages:1] valid_q;
  logic            adv, enter;
  assign adv         = !valid_q[Stages] || out_ready_i;
  assign in_ready_o  = adv;
  assign enter       = in_valid_i && adv;
  assign out_valid_o = valid_q[Stages];

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      valid_q <= '0;
    end else if (clear_i) begin
      valid_q <= '0;
    end else if (adv) begin
      valid_q <= {valid_q[Stages-1:1], enter};
    end
  end

  // ---- RNG units and Gaussians.
  // Normals of unit u at bits [16*u +: 16].
  logic [ChipSlots*16-1:0] chip_z;
  logic [ReadSlots*16-1:0] read_z;

  for (genvar u = 0; u < ChipSlots; u++) begin : g_chip_rng
    logic [31:0] rand_out;
    niu_pcg_unit #(.JumpMult(niu_constants_pkg::NIU_CHIP_JUMP_MULT), .Pipe(Pipe)) u_pcg (
      .clk_i, .rst_ni,
      .load_i(chip_load_i[u]), .load_state_i, .step_i(enter), .jump_c_i(chip_jump_c_i),
      .rand_o(rand_out));
    niu_gauss u_gauss (.clk_i, .adv_i(adv), .rand_i(rand_out), .z_o(chip_z[16*u +: 16]));
  end

  for (genvar u = 0; u < ReadSlots; u++) begin : g_read_rng
    logic [31:0] rand_out;
    niu_pcg_unit #(.JumpMult(niu_constants_pkg::NIU_READ_JUMP_MULT), .Pipe(Pipe)) u_pcg (
      .clk_i, .rst_ni,
      .load_i(read_load_i[u]), .load_state_i, .step_i(enter), .jump_c_i(read_jump_c_i),
      .rand_o(rand_out));
    niu_gauss u_gauss (.clk_i, .adv_i(adv), .rand_i(rand_out), .z_o(read_z[16*u +: 16]));
  end

  // ---- Lanes.
  for (genvar l = 0; l < Lanes; l++) begin : g_lane
    niu_lane u_lane (
      .clk_i, .adv_i(adv),
      .code_i   (in_data_i[8*l +: 8]),
      .z1_i     (chip_z[16*(4*l) +: 32]),      // units 4l (g+), 4l+1 (g-)
      .z2_i     (chip_z[16*(4*l + 2) +: 32]),  // units 4l+2 (g+), 4l+3 (g-)
      .z3_i     (read_z[16*(2*l) +: 32]),      // units 2l (g+), 2l+1 (g-)
      .gt0_i, .sp0_i, .mu0_i, .sn0_i,
      .back_k_i, .out_bits_i,
      .gt_we_i, .sp_we_i, .mu_we_i, .sn_we_i, .df_we_i, .rt_we_i,
      .table_waddr_i, .table_wdata_i,
      .code_o   (out_data_o[8*l +: 8]));
  end

endmodule
