// Hand-written parts of the onnx ops: region control flow (If, Loop, Scan),
// their verifiers, onnx.Yield's successor operands, and folders.
//
// Region signatures (ONNX semantics):
//   If    then/else: () -> (outputs...)
//   Loop  body: (iter_num, cond, v...) -> (cond, v..., scan_outputs...)
//         operands (M, cond, v_initial...), results (v_final..., scans...)
//   Scan  body: (state..., scan_elems...) -> (state..., scan_out_elems...)
//         operands (state_init..., scan_inputs...), results (state..., scans...)
#include "onnx_ad/ONNXDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace onnx_ad;

namespace {
/// Tensor types are compatible when their element types agree: ONNX lets
/// loop-carried and branch values change shape, and shapes may be unknown.
bool onnxTypesCompatible(Type lhs, Type rhs) {
  if (lhs == rhs)
    return true;
  auto l = dyn_cast<TensorType>(lhs), r = dyn_cast<TensorType>(rhs);
  return l && r && l.getElementType() == r.getElementType();
}

ONNXYieldOp yieldOf(Region &region) {
  if (region.empty())
    return nullptr;
  return dyn_cast<ONNXYieldOp>(region.front().getTerminator());
}

int64_t numScanInputs(ONNXScanOp op) {
  return op.getNumScanInputsAttr().getValue().getSExtValue();
}
} // namespace

//===----------------------------------------------------------------------===//
// If
//===----------------------------------------------------------------------===//

void ONNXIfOp::getSuccessorRegions(RegionBranchPoint point,
                                   SmallVectorImpl<RegionSuccessor> &regions) {
  if (point.isParent()) {
    regions.emplace_back(&getThenBranch());
    regions.emplace_back(&getElseBranch());
    return;
  }
  regions.emplace_back(getOperation(), getOperation()->getResults());
}

OperandRange ONNXIfOp::getEntrySuccessorOperands(RegionSuccessor) {
  return OperandRange(getOperation()->operand_end(),
                      getOperation()->operand_end());
}

bool ONNXIfOp::areTypesCompatible(Type lhs, Type rhs) {
  return onnxTypesCompatible(lhs, rhs);
}

LogicalResult ONNXIfOp::verify() {
  for (auto [name, region] : {std::pair<StringRef, Region *>{"then_branch",
                                                              &getThenBranch()},
                              {"else_branch", &getElseBranch()}}) {
    if (region->getNumArguments() != 0)
      return emitOpError() << name << " must take no arguments";
    ONNXYieldOp yield = yieldOf(*region);
    if (!yield)
      return emitOpError() << name << " must end with onnx.Yield";
    if (yield.getNumOperands() != getNumResults())
      return emitOpError() << name << " yields " << yield.getNumOperands()
                           << " values but the op has " << getNumResults()
                           << " results";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Loop
//===----------------------------------------------------------------------===//

void ONNXLoopOp::getSuccessorRegions(RegionBranchPoint point,
                                     SmallVectorImpl<RegionSuccessor> &regions) {
  Region &body = getBody();
  // Skipping iter_num: it is produced by the loop, not forwarded.
  regions.emplace_back(&body, body.getArguments().drop_front(1));
  size_t numCarried = getVInitial().size();
  regions.emplace_back(getOperation(),
                       getOperation()->getResults().take_front(numCarried));
}

OperandRange ONNXLoopOp::getEntrySuccessorOperands(RegionSuccessor successor) {
  if (successor.isParent())
    return getVInitial();
  return getOperation()->getOperands().drop_front(1); // cond, v_initial...
}

bool ONNXLoopOp::areTypesCompatible(Type lhs, Type rhs) {
  // cond may be absent (none) on entry while the body's argument is a tensor.
  return onnxTypesCompatible(lhs, rhs) || isa<NoneType>(lhs) ||
         isa<NoneType>(rhs);
}

LogicalResult ONNXLoopOp::verify() {
  Block &block = getBody().front();
  size_t numCarried = getVInitial().size();
  if (block.getNumArguments() != numCarried + 2)
    return emitOpError() << "body must take 2 + " << numCarried
                         << " arguments (iter_num, cond, carried), got "
                         << block.getNumArguments();
  ONNXYieldOp yield = yieldOf(getBody());
  if (!yield)
    return emitOpError() << "body must end with onnx.Yield";
  if (yield.getNumOperands() != getNumResults() + 1)
    return emitOpError() << "body yields " << yield.getNumOperands()
                         << " values, expected 1 + " << getNumResults()
                         << " (cond, carried, scan outputs)";
  if (getNumResults() < numCarried)
    return emitOpError() << "has " << getNumResults()
                         << " results, fewer than its " << numCarried
                         << " carried values";
  return success();
}

//===----------------------------------------------------------------------===//
// Scan
//===----------------------------------------------------------------------===//

void ONNXScanOp::getSuccessorRegions(RegionBranchPoint point,
                                     SmallVectorImpl<RegionSuccessor> &regions) {
  Region &body = getBody();
  int64_t numState = getNumOperands() - numScanInputs(*this);
  regions.emplace_back(&body, body.getArguments().take_front(numState));
  regions.emplace_back(getOperation(),
                       getOperation()->getResults().take_front(numState));
}

OperandRange ONNXScanOp::getEntrySuccessorOperands(RegionSuccessor) {
  return getOperation()->getOperands().take_front(getNumOperands() -
                                                  numScanInputs(*this));
}

bool ONNXScanOp::areTypesCompatible(Type lhs, Type rhs) {
  return onnxTypesCompatible(lhs, rhs);
}

LogicalResult ONNXScanOp::verify() {
  int64_t numScan = numScanInputs(*this);
  if (numScan < 1 || numScan > static_cast<int64_t>(getNumOperands()))
    return emitOpError() << "num_scan_inputs = " << numScan
                         << " must be in [1, " << getNumOperands() << "]";
  int64_t numState = getNumOperands() - numScan;
  Block &block = getBody().front();
  if (block.getNumArguments() != getNumOperands())
    return emitOpError() << "body must take " << getNumOperands()
                         << " arguments (state, scan elements), got "
                         << block.getNumArguments();
  ONNXYieldOp yield = yieldOf(getBody());
  if (!yield)
    return emitOpError() << "body must end with onnx.Yield";
  if (yield.getNumOperands() != getNumResults())
    return emitOpError() << "body yields " << yield.getNumOperands()
                         << " values but the op has " << getNumResults()
                         << " results";
  if (static_cast<int64_t>(getNumResults()) < numState)
    return emitOpError() << "has " << getNumResults()
                         << " results, fewer than its " << numState
                         << " state values";
  return success();
}

//===----------------------------------------------------------------------===//
// Yield
//===----------------------------------------------------------------------===//

MutableOperandRange ONNXYieldOp::getMutableSuccessorOperands(RegionSuccessor successor) {
  Operation *parent = getOperation()->getParentOp();
  MutableOperandRange all(getOperation());
  if (auto loop = dyn_cast<ONNXLoopOp>(parent)) {
    unsigned numCarried = loop.getVInitial().size();
    if (successor.isParent())
      return all.slice(1, numCarried);      // v_final
    return all.slice(0, 1 + numCarried);    // cond, v  -> next iteration
  }
  if (auto scan = dyn_cast<ONNXScanOp>(parent)) {
    unsigned numState = scan.getNumOperands() - numScanInputs(scan);
    return all.slice(0, numState);
  }
  return all;
}

//===----------------------------------------------------------------------===//
// Folders
//===----------------------------------------------------------------------===//

OpFoldResult ONNXConstantOp::fold(FoldAdaptor) {
  return getValueAttr();
}

OpFoldResult ONNXIdentityOp::fold(FoldAdaptor) {
  if (getInput().getType() != getType())
    return nullptr;
  return getInput();
}
