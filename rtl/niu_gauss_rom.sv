// The Gaussian ROM: the normal of every {sign, group, window} cell, Q3.12 (docs/niu_datapath.md
// 4.3), for uniforms of UBits bits, with two registered read ports.  The contents are generated
// (niu_gauss_rom.svh from rtl/niu_gen.py); written as an initialised array with synchronous reads
// so that synthesis maps it to one 1K x 18 block RAM (RAMB18E2) used as a dual-port ROM.
module niu_gauss_rom #(
  parameter int UBits = niu_constants_pkg::NIU_GAUSS_CHIP_U_BITS  // the ROM of 24- or 16-bit uniforms
) (
  input  logic                                                clk_i,
  input  logic                                                en_i,     // reads move on en_i
  input  logic [niu_constants_pkg::NIU_GAUSS_INDEX_BITS-1:0]  addr_a_i,
  input  logic [niu_constants_pkg::NIU_GAUSS_INDEX_BITS-1:0]  addr_b_i,
  output logic [niu_constants_pkg::NIU_Z_BITS-1:0]            data_a_o,
  output logic [niu_constants_pkg::NIU_Z_BITS-1:0]            data_b_o
);

  localparam int Entries = niu_constants_pkg::NIU_GAUSS_ENTRIES;

  logic [niu_constants_pkg::NIU_Z_BITS-1:0] rom [Entries];
  initial begin
    `include "niu_gauss_rom.svh"
  end

  always_ff @(posedge clk_i) begin
    if (en_i) begin
      data_a_o <= rom[addr_a_i];
      data_b_o <= rom[addr_b_i];
    end
  end

endmodule
