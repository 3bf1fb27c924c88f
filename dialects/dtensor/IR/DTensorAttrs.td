//===- DTensorAttrs.td - mesh and placement attributes -----*- tablegen -*-===//
#ifndef DTENSOR_ATTRS
#define DTENSOR_ATTRS

include "DTensorBase.td"

def DTensor_MeshAttr : AttrDef<DTensor_Dialect, "Mesh"> {
  let mnemonic = "mesh";
  let summary = "A device mesh: an N-D array of ranks";
  let description = [{
    The shape of the mesh, optional names of its dims and the device type.
    Rank `r` of the mesh sits at the row-major coordinates of `r`.

    ```mlir
    #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
    #dtensor.mesh<[4], device = "cuda">
    ```
  }];
  let parameters = (ins
    ArrayRefParameter<"int64_t", "mesh shape">:$shape,
    OptionalArrayRefParameter<"::mlir::StringAttr", "mesh dim names">:$dimNames,
    StringRefParameter<"device type", "\"cpu\"">:$device
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getRank() const { return getShape().size(); }
    int64_t getNumDevices() const;
  }];
}

def DTensor_PlacementAttr : AttrDef<DTensor_Dialect, "Placement"> {
  let mnemonic = "placement";
  let summary = "How a tensor is laid out along one mesh dim";
  let description = [{
    `S(d)`: tensor dim `d` is split over the mesh dim (torch.chunk pieces:
    leading ranks get the ceil-sized pieces). `R`: every rank holds the whole
    tensor. `P(op)` with op in sum, avg, max, min: every rank holds a partial
    value; the tensor is their reduction.

    ```mlir
    #dtensor.placement<S(0)>
    #dtensor.placement<R>
    #dtensor.placement<P(sum)>
    ```
  }];
  let parameters = (ins "::dtorch::Placement":$value);
  let hasCustomAssemblyFormat = 1;
}

#endif // DTENSOR_ATTRS
