# lit configuration for DTorch's IR tests (dtorch-opt + FileCheck).
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "DTorch-IR"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.dtorch_obj_root
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in"]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(
    [ToolSubst("dtorch-opt", unresolved="fatal"),
     ToolSubst("dtorch-gpu-kernel", unresolved="ignore")],
    [config.dtorch_tools_dir])

# The GPU kernel tests need dtorch-gpu-kernel (built with the runtime); the
# PTX they print is assembled by the CUDA toolkit's ptxas where it exists.
if os.path.exists(os.path.join(config.dtorch_tools_dir, "dtorch-gpu-kernel")):
    config.available_features.add("gpu-kernel-codegen")
for ptxas in [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                           "bin", "ptxas"), "/usr/local/cuda/bin/ptxas"]:
    if os.path.exists(ptxas):
        config.available_features.add("ptxas")
        config.substitutions.append(("%ptxas", ptxas))
        break
