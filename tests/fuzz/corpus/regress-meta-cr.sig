# A small valid signature: a norm, a cast into a matmul, an attention.
h3sig 1
meta modeltest-model
meta group block
meta torch 2.12.0+cu130
meta cuda 13000
meta sm 90
meta created 2026-11-29
meta source hand-written test file
call 0 launch _ZN2at6native53_GLOBAL__N__21739S7_PS4_
  config 1797 1 1 32 4 1 0
  params 4 4 8 8 8 8 8 8
  bytes 0 0 00080000
  bytes 1 0 acc52737
  slot 0 2 0 first       # h
  slot 1 3 0 first       # gamma
  bytes 4 0 0000000000000000
  bytes 5 0 0005000000000000
  slot 2 6 0 first       # rstd
  slot 3 7 0 first       # out
call 1 launch _ZN2at6native29vectorized_eledead_cudaKRNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 3594 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00283800
  slot 0 2 0 first       # outlauÿÿÿÿ 1 2 8 @0.3        # in 9 norm out
call 2 matmul
  desc compute=68 scale=0 transa=1 transb=0 epilogue=4 m=6144 n=1797 k=2048
  algo id=66 tile=415  # gammcudnnytes 4 0!0000000A 0  3 uid:3 0 fiead @0.2
dead @1.0
end
