//===- dtorch-opt.cpp - the mlir-opt of DTorch ---------------------------===//
#include "dtensor/IR/DTensor.h"
#include "dtensor/Transforms/Passes.h"
#include "rank/IR/Rank.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<dtorch::dtensor::DTensorDialect, dtorch::rank::RankDialect,
                  mlir::func::FuncDialect>();
  mlir::registerTransformsPasses();
  dtorch::dtensor::registerDTensorPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "DTorch optimizer driver\n", registry));
}
