// RUN: dtorch-opt %s --dtensor-print-sharding-rules --verify-diagnostics

#m = #dtensor.mesh<[2]>

// Every op family's rule, as the propagation pass sees it.
func.func @rules(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %b: !dtensor.tensor<6x8xf32, #m, [R]>,
                 %c: !dtensor.tensor<2x4x6xf32, #m, [R]>, %d: !dtensor.tensor<2x6x8xf32, #m, [R]>) {
  // expected-remark @+1 {{sharding rule: () -> ([i, j]) reduction={} joint={} linear={}}}
  %0 = dtensor.full 1.0 : !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: () -> ([i, j]) reduction={} joint={} linear={}}}
  %1 = dtensor.random seed = 1 distribution = "normal" : !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: () -> ([i]) reduction={} joint={} linear={}}}
  %2 = dtensor.constant dense<[1.0, 2.0]> : tensor<2xf32> : !dtensor.tensor<2xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={sum, avg} linear={}}}
  %3 = dtensor.add %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={sum, avg} linear={}}}
  %4 = dtensor.sub %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={0, 1}}}
  %5 = dtensor.mul %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={0}}}
  %6 = dtensor.div %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={max} linear={}}}
  %7 = dtensor.maximum %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={min} linear={}}}
  %8 = dtensor.minimum %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %9 = dtensor.pow %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={0}}}
  %10 = dtensor.neg %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %11 = dtensor.gelu %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, k], [k, j]) -> ([i, j]) reduction={k}:sum joint={} linear={0, 1}}}
  %12 = dtensor.matmul %a, %b : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<6x8xf32, #m, [R]>) -> !dtensor.tensor<4x8xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j, l], [i, l, k]) -> ([i, j, k]) reduction={l}:sum joint={} linear={0, 1}}}
  %13 = dtensor.bmm %c, %d : (!dtensor.tensor<2x4x6xf32, #m, [R]>, !dtensor.tensor<2x6x8xf32, #m, [R]>) -> !dtensor.tensor<2x4x8xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i]) reduction={j}:sum joint={sum, avg} linear={}}}
  %14 = dtensor.sum %a dims = [1] : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([_, j]) reduction={i}:sum joint={sum, avg} linear={}}}
  %15 = dtensor.mean %a dims = [0] keepdim : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<1x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([]) reduction={i, j}:max joint={max} linear={}}}
  %16 = dtensor.max %a dims = [0, 1] : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<f32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j, _]) reduction={} joint={sum, avg, max, min} linear={} even={j}}}
  %17 = dtensor.reshape %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x2x3xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([j, i]) reduction={} joint={sum, avg, max, min} linear={}}}
  %18 = dtensor.transpose %a perm = [1, 0] : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<6x4xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([j, k]) -> ([i, j, k]) reduction={} joint={sum, avg, max, min} linear={}}}
  %19 = dtensor.broadcast_to %b : (!dtensor.tensor<6x8xf32, #m, [R]>) -> !dtensor.tensor<5x6x8xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={max, min} linear={}}}
  %20 = dtensor.cast %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi64, #m, [R]>
  return
}

// The rules of the comparison, selection, arg-reduction and indexing ops.
func.func @new_rules(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %i: !dtensor.tensor<4x2xi64, #m, [R]>, %v: !dtensor.tensor<3xi64, #m, [R]>, %b: !dtensor.tensor<4x6xi1, #m, [R]>) {
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %0 = dtensor.lt %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %1 = dtensor.where %b, %a, %a : (!dtensor.tensor<4x6xi1, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i]) reduction={j}:min joint={min} linear={}}}
  %2 = dtensor.min %a dims = [1] : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, _]) -> ([i]) reduction={} joint={} linear={}}}
  %3 = dtensor.argmax %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xi64, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, _]) -> ([i, _]) reduction={} joint={sum, avg, max, min} linear={}}}
  %4 = dtensor.slice %a {offsets = array<i64: 0, 1>, sizes = array<i64: 4, 2>, strides = array<i64: 1, 3>} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x2xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, _], [i, _]) -> ([i, _]) reduction={} joint={sum, avg, max, min} linear={}}}
  %5 = dtensor.concat %a, %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x12xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, _], [i, j]) -> ([i, j]) reduction={} joint={} linear={0}}}
  %6 = dtensor.gather %a, %i {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x2xi64, #m, [R]>) -> !dtensor.tensor<4x2xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([k, i], [j]) -> ([j, i]) reduction={k}:sum joint={} linear={0}}}
  %7 = dtensor.index_select %a, %v {dim = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<3xi64, #m, [R]>) -> !dtensor.tensor<3x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, _], [i, _], [i, _]) -> ([i, _]) reduction={} joint={} linear={}}}
  %8 = dtensor.scatter_add %a, %i, %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x2xi64, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={sum, avg, max, min} linear={}}}
  %9 = dtensor.tril %a {diagonal = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: () -> ([i]) reduction={} joint={} linear={}}}
  %10 = dtensor.iota {dim = 0 : i64, start = 0.0 : f64, step = 1.0 : f64} : () -> !dtensor.tensor<8xi64, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, _]) -> ([i, _]) reduction={} joint={} linear={}}}
  %11 = dtensor.topk_indices %a {dim = 1 : i64, k = 2 : i64, largest = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x2xi64, #m, [R]>
  return
}

// Every unary op and comparison has the dim-by-dim rule; none passes partials
// through except as its ODS entry declares.
func.func @more_rules(%a: !dtensor.tensor<4x6xf32, #m, [R]>) {
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %abs = dtensor.abs %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %cos = dtensor.cos %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %exp = dtensor.exp %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %log = dtensor.log %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %relu = dtensor.relu %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %rsqrt = dtensor.rsqrt %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %sigmoid = dtensor.sigmoid %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %silu = dtensor.silu %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %sin = dtensor.sin %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %sqrt = dtensor.sqrt %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %tanh = dtensor.tanh %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %eq = dtensor.eq %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %ne = dtensor.ne %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %le = dtensor.le %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %gt = dtensor.gt %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j], [i, j]) -> ([i, j]) reduction={} joint={} linear={}}}
  %ge = dtensor.ge %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, _]) -> ([i]) reduction={} joint={} linear={}}}
  %argmin = dtensor.argmin %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xi64, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={sum, avg, max, min} linear={}}}
  %triu = dtensor.triu %a {diagonal = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  return
}

// Reshape: the outer dims of a merge or split share an even factor (their
// gcd); inner dims and coprime outer dims share nothing.
func.func @reshape_rules(%a: !dtensor.tensor<8x6xf32, #m, [R]>, %b: !dtensor.tensor<48xf32, #m, [R]>,
                         %c: !dtensor.tensor<6x4xf32, #m, [R]>, %d: !dtensor.tensor<3x4xf32, #m, [R]>) {
  // expected-remark @+1 {{sharding rule: ([i, _]) -> ([i]) reduction={} joint={sum, avg, max, min} linear={} even={i}}}
  %0 = dtensor.reshape %a : (!dtensor.tensor<8x6xf32, #m, [R]>) -> !dtensor.tensor<48xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i]) -> ([i, _]) reduction={} joint={sum, avg, max, min} linear={} even={i}}}
  %1 = dtensor.reshape %b : (!dtensor.tensor<48xf32, #m, [R]>) -> !dtensor.tensor<8x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, _, j]) reduction={} joint={sum, avg, max, min} linear={} even={i}}}
  %2 = dtensor.reshape %a : (!dtensor.tensor<8x6xf32, #m, [R]>) -> !dtensor.tensor<2x4x6xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([i, _]) -> ([i, _]) reduction={} joint={sum, avg, max, min} linear={} even={i}}}
  %3 = dtensor.reshape %c : (!dtensor.tensor<6x4xf32, #m, [R]>) -> !dtensor.tensor<2x12xf32, #m, [R]>
  // expected-remark @+1 {{sharding rule: ([_, _]) -> ([_, _]) reduction={} joint={sum, avg, max, min} linear={}}}
  %4 = dtensor.reshape %d : (!dtensor.tensor<3x4xf32, #m, [R]>) -> !dtensor.tensor<4x3xf32, #m, [R]>
  return
}

// bmm with two batch dims: each keeps its own factor.
func.func @bmm_rules(%q: !dtensor.tensor<4x2x6x8xf32, #m, [R]>, %k: !dtensor.tensor<4x2x8x6xf32, #m, [R]>) {
  // expected-remark @+1 {{sharding rule: ([i, j, k, m], [i, j, m, l]) -> ([i, j, k, l]) reduction={m}:sum joint={} linear={0, 1}}}
  %0 = dtensor.bmm %q, %k : (!dtensor.tensor<4x2x6x8xf32, #m, [R]>, !dtensor.tensor<4x2x8x6xf32, #m, [R]>) -> !dtensor.tensor<4x2x6x6xf32, #m, [R]>
  return
}

// Point-to-point moves carry every rank's piece whole: the operand (none for
// a receive) and the result share every dim, and a partial of any reduction
// stays one.
#pp = #dtensor.mesh<[2, 2], names = ["pp", "dp"]>
func.func @point_to_point_rules(%x: !dtensor.tensor<4x6xf32, #pp, [S(0), P(sum)]>) {
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={sum, avg, max, min} linear={}}}
  %0 = dtensor.transfer %x {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 1>} : !dtensor.tensor<4x6xf32, #pp, [S(0), P(sum)]>
  // expected-remark @+1 {{sharding rule: ([i, j]) -> ([i, j]) reduction={} joint={sum, avg, max, min} linear={}}}
  %1 = dtensor.send %0 {peers = array<i64: 4, 5, 6, 7>, tag = 1048576 : i64} : !dtensor.tensor<4x6xf32, #pp, [S(0), P(sum)]>
  // expected-remark @+1 {{sharding rule: () -> ([i, j]) reduction={} joint={sum, avg, max, min} linear={}}}
  %2 = dtensor.recv {peers = array<i64: 4, 5, 6, 7>, tag = 1048576 : i64} : !dtensor.tensor<4x6xf32, #pp, [S(0), P(sum)]>
  return
}

// The exchange of counted rows: dim 0 (the positions) is one factor of the
// rows, the counts and the result; the slot rows and the segments have
// none; the feature dim passes through; linear in the rows.
#ep = #dtensor.mesh<[2]>
func.func @all_to_all_v_rule(%x: !dtensor.tensor<2x8x4xf32, #ep, [S(0)]>, %c: !dtensor.tensor<2x4xi64, #ep, [S(0)]>) {
  // expected-remark @+1 {{sharding rule: ([i, _, j], [i, _]) -> ([i, _, j]) reduction={} joint={} linear={0} even={i}}}
  %0 = dtensor.all_to_all_v %x, %c {axis = 0 : i64} : (!dtensor.tensor<2x8x4xf32, #ep, [S(0)]>, !dtensor.tensor<2x4xi64, #ep, [S(0)]>) -> !dtensor.tensor<2x8x4xf32, #ep, [S(0)]>
  return
}
