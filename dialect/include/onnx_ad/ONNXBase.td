// The onnx dialect: base definitions, types and the hand-written ops.
// Generated schema ops live in ONNXOps.td (dialect/gen_onnx_ods.py).
#ifndef ONNX_AD_ONNX_BASE
#define ONNX_AD_ONNX_BASE

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/LoopLikeInterface.td"

def ONNX_Dialect : Dialect {
  let name = "onnx";
  let summary = "ONNX operators, one op per schema version";
  let description = [{
    Operands follow the schema order; an absent optional operand is the
    `none` result of `onnx.NoValue`.  GRAPH attributes are regions ended by
    `onnx.Yield`; region bodies reference outer values directly.
  }];
  let cppNamespace = "::onnx_ad";
  let useDefaultTypePrinterParser = 1;
  let hasConstantMaterializer = 1;
}

class ONNX_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<ONNX_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def ONNX_String : ONNX_Type<"String", "String"> {
  let summary = "ONNX string element type";
}

def ONNX_Seq : ONNX_Type<"Seq", "Seq"> {
  let summary = "ONNX sequence of tensors";
  let parameters = (ins "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $elementType `>`";
}

def ONNX_Opt : ONNX_Type<"Opt", "Opt"> {
  let summary = "ONNX optional value";
  let parameters = (ins "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $elementType `>`";
}

def ONNX_StringType : Type<CPred<"::llvm::isa<::onnx_ad::StringType>($_self)">,
                           "onnx string type">;
def ONNX_AnySeq : Type<CPred<"::llvm::isa<::onnx_ad::SeqType>($_self)">,
                       "onnx sequence type">;
def ONNX_AnyOpt : Type<CPred<"::llvm::isa<::onnx_ad::OptType>($_self)">,
                       "onnx optional type">;

class ONNX_Op<string mnemonic, list<Trait> traits = []>
    : Op<ONNX_Dialect, mnemonic, traits>;

def ONNXNoValueOp : ONNX_Op<"NoValue", [Pure]> {
  let summary = "The absent value of an optional operand or result";
  let description = [{
    Deliberately not ConstantLike: constant matchers must not treat an absent
    operand as a constant.
  }];
  let arguments = (ins UnitAttr:$value);
  let results = (outs NoneType:$none_val);
}

def ONNXYieldOp : ONNX_Op<"Yield", [Pure, Terminator,
    NativeOpTrait<"ReturnLike">,
    DeclareOpInterfaceMethods<RegionBranchTerminatorOpInterface>,
    ParentOneOf<["ONNXIfOp", "ONNXLoopOp", "ONNXScanOp", "ONNXScanV8Op",
                 "ONNXSequenceMapOp"]>]> {
  let summary = "Ends a region of If, Loop, Scan or SequenceMap";
  let arguments = (ins Variadic<AnyType>:$operands);
}

#endif // ONNX_AD_ONNX_BASE
