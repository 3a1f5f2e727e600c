// Hand-written parts of the onnx ops: region control flow (If, Loop, Scan),
// the loop regions of Loop and Scan (LoopLikeOpInterface),
// their verifiers, onnx.Yield's successor operands, and folders.
//
// Region signatures (ONNX semantics):
//   If    then/else: () -> (outputs...)
//   Loop  body: (iter_num, cond, v...) -> (cond, v..., scan_outputs...)
//         operands (M, cond, v_initial...), results (v_final..., scans...)
//   Scan  body: (state..., scan_elems...) -> (state..., scan_out_elems...)
//         operands (state_init..., scan_inputs...), results (state..., scans...)
//
// RegionBranchOpInterface models only plain dataflow.  Values that steer
// control (Loop's M and cond, the cond a Loop body yields) and values the op
// makes itself (iter_num, the body's cond argument, Scan's per-iteration
// slices, scan outputs) are not successor operands/inputs: dataflow analyses
// then treat them as unknown, and liveness-based rewrites (remove-dead-values)
// keep a yielded cond alive whenever the loop is, instead of replacing it by
// poison as they would a value that only feeds the next iteration.
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
  // Op verifiers run before the region's own checks: a body may still lack a
  // terminator here (getTerminator() would assert on user input).
  if (region.empty() || !region.front().mightHaveTerminator())
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

void ONNXIfOp::getRegionInvocationBounds(
    ArrayRef<Attribute> operands, SmallVectorImpl<InvocationBounds> &bounds) {
  // One branch runs exactly once; which one is known for a constant cond.
  auto cond = dyn_cast_or_null<DenseElementsAttr>(operands.empty() ? Attribute()
                                                                   : operands[0]);
  if (cond && cond.isSplat() && cond.getElementType().isInteger(1)) {
    bool taken = cond.getSplatValue<bool>();
    bounds.emplace_back(taken ? 1 : 0, taken ? 1 : 0);
    bounds.emplace_back(taken ? 0 : 1, taken ? 0 : 1);
    return;
  }
  bounds.assign(2, InvocationBounds(0, 1));
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
  // Skipping iter_num and cond: made by the loop, not forwarded.
  regions.emplace_back(&body, body.getArguments().drop_front(2));
  size_t numCarried = getVInitial().size();
  regions.emplace_back(getOperation(),
                       getOperation()->getResults().take_front(numCarried));
}

OperandRange ONNXLoopOp::getEntrySuccessorOperands(RegionSuccessor) {
  return getVInitial(); // to the body and, for zero trips, to the results
}

bool ONNXLoopOp::areTypesCompatible(Type lhs, Type rhs) {
  return onnxTypesCompatible(lhs, rhs);
}

// Loop-invariant code motion: the body is the loop region; values defined
// outside it (captured outer values) are invariant.  Pure ops are
// speculatable, so hoisting them out of a zero-trip loop is allowed.
SmallVector<Region *> ONNXLoopOp::getLoopRegions() { return {&getBody()}; }

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

SmallVector<Region *> ONNXScanOp::getLoopRegions() { return {&getBody()}; }

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
    // (cond, v..., scan outputs...): only v is forwarded, to the next
    // iteration or to the results.
    return all.slice(1, loop.getVInitial().size());
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
  // ConstantLike: constant matchers assert that the op folds, whichever of
  // ONNX's value attributes it carries (value_float, value_ints, ...).
  for (StringRef name : {"value", "sparse_value", "value_float", "value_floats",
                         "value_int", "value_ints", "value_string",
                         "value_strings"})
    if (Attribute attr = getOperation()->getAttr(name))
      return attr;
  return UnitAttr::get(getContext()); // no value: still a (degenerate) constant
}

OpFoldResult ONNXIdentityOp::fold(FoldAdaptor) {
  if (getInput().getType() != getType())
    return nullptr;
  return getInput();
}

namespace {
/// The permutation of a Transpose: its `perm`, else the reversal ONNX
/// defaults to (which needs a ranked operand).
std::optional<SmallVector<int64_t>> transposePerm(Operation *op) {
  if (auto perm = op->getAttrOfType<ArrayAttr>("perm")) {
    SmallVector<int64_t> out;
    for (Attribute a : perm)
      out.push_back(cast<IntegerAttr>(a).getInt());
    return out;
  }
  auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  if (!type)
    return std::nullopt;
  SmallVector<int64_t> out;
  for (int64_t i = type.getRank() - 1; i >= 0; --i)
    out.push_back(i);
  return out;
}
} // namespace

OpFoldResult ONNXTransposeOp::fold(FoldAdaptor) {
  // Derivative layouts bracket computations with Transposes (seed layout in,
  // result layout out): identities and inverse pairs vanish here.
  Operation *op = getOperation();
  Value input = op->getOperand(0);
  std::optional<SmallVector<int64_t>> perm = transposePerm(op);
  if (!perm)
    return nullptr;
  auto isIdentity = [](ArrayRef<int64_t> p) {
    for (auto [i, v] : llvm::enumerate(p))
      if (static_cast<int64_t>(i) != v)
        return false;
    return true;
  };
  if (isIdentity(*perm) && input.getType() == getType())
    return input;
  auto inner = input.getDefiningOp<ONNXTransposeOp>();
  if (!inner)
    return nullptr;
  std::optional<SmallVector<int64_t>> innerPerm = transposePerm(inner);
  if (!innerPerm || innerPerm->size() != perm->size())
    return nullptr;
  SmallVector<int64_t> composed;
  for (int64_t p : *perm)
    composed.push_back((*innerPerm)[p]);
  Value source = inner->getOperand(0);
  if (isIdentity(composed) && source.getType() == getType())
    return source;
  return nullptr;
}
