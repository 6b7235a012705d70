// Two-entry skid buffer: a valid/ready register slice whose ready output is a register.
//
// It cuts the combinational ready path between AXI channels and the noise pipeline, so that WREADY
// never reaches RREADY in the same cycle, at full throughput (one beat per cycle).
module niu_skid #(
  parameter int Width = niu_constants_pkg::NIU_AXI_DATA_BITS
) (
  input  logic             clk_i,
  input  logic             rst_ni,
  input  logic             clear_i,    // drop any held data (new transfer)
  input  logic             valid_i,
  output logic             ready_o,
  input  logic [Width-1:0] data_i,
  output logic             valid_o,
  input  logic             ready_i,
  output logic [Width-1:0] data_o
);

  // out_q: the entry presented downstream; skid_q: the one caught while downstream stalled.
  logic             out_valid_d, out_valid_q;
  logic             skid_valid_d, skid_valid_q;
  logic [Width-1:0] out_data_d, out_data_q;
  logic [Width-1:0] skid_data_d, skid_data_q;

  assign ready_o = !skid_valid_q;
  assign valid_o = out_valid_q;
  assign data_o  = out_data_q;

  always_comb begin
    out_valid_d  = out_valid_q;
    out_data_d   = out_data_q;
    skid_valid_d = skid_valid_q;
    skid_data_d  = skid_data_q;
    if (clear_i) begin
      out_valid_d  = 1'b0;
      skid_valid_d = 1'b0;
    end else begin
      if (!out_valid_q || ready_i) begin
        // The output slot frees up: refill from the skid entry first, then from the input.
        if (skid_valid_q) begin
          out_valid_d  = 1'b1;
          out_data_d   = skid_data_q;
          skid_valid_d = 1'b0;  // ready_o was low: nothing entered this cycle
        end else begin
          out_valid_d = valid_i;
          out_data_d  = data_i;
        end
      end else if (valid_i && !skid_valid_q) begin
        skid_valid_d = 1'b1;
        skid_data_d  = data_i;
      end
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      out_valid_q  <= 1'b0;
      skid_valid_q <= 1'b0;
    end else begin
      out_valid_q  <= out_valid_d;
      skid_valid_q <= skid_valid_d;
    end
  end

  // Data registers need no reset: they are qualified by the valid bits.
  always_ff @(posedge clk_i) begin
    out_data_q  <= out_data_d;
    skid_data_q <= skid_data_d;
  end

endmodule
