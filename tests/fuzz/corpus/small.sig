# A small valid signature: a norm, a cast into a matmul, an attention.
h3sig 1
meta model test-model
meta group block
meta torch 2.11.0+cu130
meta cuda 13000
meta sm 90
meta created 2026-11-29
meta source hand-written test file
call 0 launch _ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28vectorized_layer_norm_kernelIffLb1EEEviT0_PKT_S6_S6_PS3_S7_PS4_
  config 1797 1 1 32 4 1 0
  params 4 4 8 8 8 8 8 8
  bytes 0 0 00080000
  bytes 1 0 acc52737
  slot 0 2 0 first       # h
  slot 1 3 0 first       # gamma
  bytes 4 0 0000000000000000
  bytes 5 0 0000000000000000
  slot 2 6 0 first       # rstd
  slot 3 7 0 first       # out
call 1 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 3594 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00283800
  slot 0 2 0 first       # out
  slot 1 2 8 @0.3        # in = norm out
call 2 matmul
  desc compute=68 scale=0 transa=1 transb=0 epilogue=4 m=6144 n=1797 k=2048
  algo id=66 tile=415 stages=35 splitk=1
  slot 0 A 0 first
  slot 1 B 0 @1.0
  slot 2 D 0 first
  slot 3 bias 0 first
call 3 cudnn
  uids 3 5 0 1 2
  slot 0 uid:0 0 @2.2
  slot 1 uid:1 0 @2.2+128
  slot 2 uid:2 0 @2.2+256
  slot 3 uid:3 0 first
dead @0.2
dead @1.0
end
