#m = #dtensor.mesh<[2]>
func.func @more_rules(%a: !dtensor.tensor<4x6xf32, #m, [R]>) {
  %abs = dtensor.abs %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %cos = dtensor.cos %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %exp = dtensor.exp %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %log = dtensor.log %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %relu = dtensor.relu %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %rsqrt = dtensor.rsqrt %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %sigmoid = dtensor.sigmoid %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %silu = dtensor.silu %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %sin = dtensor.sin %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %sqrt = dtensor.sqrt %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %tanh = dtensor.tanh %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %eq = dtensor.eq %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  %ne = dtensor.ne %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  %le = dtensor.le %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  %gt = dtensor.gt %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  %ge = dtensor.ge %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  %argmin = dtensor.argmin %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xi64, #m, [R]>
  %triu = dtensor.triu %a {diagonal = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  return
}
