func.func @bad_reduce(%x: tensor<4xf32>) {
  %0 = rank.all_reduce %x {axis = 0 : i64, reduce = "prod"} : tensor<4xf32> -> tensor<4xf32>
  return
}
