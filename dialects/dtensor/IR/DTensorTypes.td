//===- DTensorTypes.td - the distributed tensor type -------*- tablegen -*-===//
#ifndef DTENSOR_TYPES
#define DTENSOR_TYPES

include "DTensorAttrs.td"

def DTensor_DTensorType : TypeDef<DTensor_Dialect, "DTensor"> {
  let mnemonic = "tensor";
  let summary = "A tensor distributed over a device mesh";
  let description = [{
    Global shape and element type, the mesh and one placement per mesh dim.

    ```mlir
    !dtensor.tensor<7x5xf32, #dtensor.mesh<[2, 2]>, [S(0), R]>
    ```
  }];
  let parameters = (ins
    ArrayRefParameter<"int64_t", "global shape">:$shape,
    "::mlir::Type":$elementType,
    "MeshAttr":$mesh,
    ArrayRefParameter<"PlacementAttr", "one placement per mesh dim">:$placements
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getRank() const { return getShape().size(); }
    int64_t getNumElements() const;
    /// The placements as the MLIR-free layout library sees them.
    ::dtorch::Placements getLayout() const;
    /// The same tensor with other placements.
    DTensorType withPlacements(const ::dtorch::Placements &placements) const;
    DTensorType withShape(::llvm::ArrayRef<int64_t> shape) const;
    /// Local shape on the rank at the given mesh coordinates.
    ::llvm::SmallVector<int64_t> getLocalShape(::llvm::ArrayRef<int64_t> coords) const;
  }];
}

#endif // DTENSOR_TYPES
