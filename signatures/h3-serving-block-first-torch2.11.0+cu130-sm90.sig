# Recorded by scripts/record_signature.py from h3-serving3-h200-torch2.11-a.jsonl.gz h3-serving3-h200-torch2.11-b.jsonl.gz h3-serving3-h200-torch2.11-c.jsonl.gz,
# after the last launch of a kernel named like 'spin':
# 42 calls (37 launch, 4 matmul, 1 cudnn), 21 instances in 3 trace(s); slots: 58 first, 57 @, 0 null; 0 dead.
# bytes: equal in every instance; pointer slots and words holding host addresses are left out.
h3sig 1
meta model minimax-h3-vae-decoder
meta group block-serving-first
meta torch 2.11.0+cu130
meta cuda 13000
meta sm 90
meta created 2026-12-01
meta cublaslt 130100
meta cudnn 91900
meta source h3-serving3-h200-torch2.11-a.jsonl.gz h3-serving3-h200-torch2.11-b.jsonl.gz h3-serving3-h200-torch2.11-c.jsonl.gz
# layer_norm
call 0 launch _ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28vectorized_layer_norm_kernelIffLb1EEEviT0_PKT_S6_S6_PS3_S7_PS4_
  config 1797 1 1 32 4 1 24
  params 4 4 8 8 8 8 8 8
  bytes 0 0 00080000
  bytes 1 0 acc52737
  slot 0 2 0 first
  slot 1 3 0 first
  bytes 4 0 0000000000000000
  bytes 5 0 0000000000000000
  slot 2 6 0 first
  slot 3 7 0 first
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 1 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 6 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00180000
  slot 0 2 0 first
  slot 1 2 8 first
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 2 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 12288 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 0000c000
  slot 0 2 0 first
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 3 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 3594 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00283800
  slot 0 2 0 first
  slot 1 2 8 @0.3
# matmul m=6144 n=1797 k=2048
call 4 matmul
  desc compute=68 scale=0 transa=1 transb=0 epilogue=4 bias_type=-1 m=6144 n=1797 k=2048 workspace=1048576 a.type=2 a.order=0 a.rows=2048 a.cols=6144 a.ld=2048 a.batch=1 a.stride=0 b.type=2 b.order=0 b.rows=2048 b.cols=1797 b.ld=2048 b.batch=1 b.stride=0 c.type=2 c.order=0 c.rows=6144 c.cols=1797 c.ld=6144 c.batch=1 c.stride=0 d.type=2 d.order=0 d.rows=6144 d.cols=1797 d.ld=6144 d.batch=1 d.stride=0
  algo id=66 tile=415 stages=35 splitk=1 reduction=0 swizzle=0 custom=5 cluster=3 inner=0
  slot 0 A 0 @2.0
  slot 1 B 0 @3.0
  slot 2 C 0 first
  slot 3 D 0 first
  slot 4 bias 0 @1.0
# direct_copy
# 474 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<2> (parameter 1 offset 0, 2 dims), the captureless functor (parameter 1 offset 520) and the closure's tail (13 bytes from offset 523)
call 5 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_15gpu_kernel_implIZZZNS0_23direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE5_clEvEUlfE_EEvS4_RKT_EUliE_EEviT1_
  config 7188 1 1 128 1 1 0
  params 4 536
  bytes 0 0 00283800
  bytes 1 0 02000000400000000100000006000000a0e000003ae3c12310000000
  bytes 1 304 04000000020000000001000080010000
  slot 0 1 504 first
  slot 1 1 512 @4.3
  bytes 1 521 0605
# layer_norm
call 6 launch _ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28vectorized_layer_norm_kernelIffLb1EEEviT0_PKT_S6_S6_PS3_S7_PS4_
  config 57504 1 1 32 4 1 24
  params 4 4 8 8 8 8 8 8
  bytes 0 0 40000000
  bytes 1 0 acc52737
  slot 0 2 0 @5.0
  bytes 3 0 0000000000000000
  bytes 4 0 0000000000000000
  bytes 5 0 0000000000000000
  slot 1 6 0 first
  slot 2 7 0 first
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 7 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 3594 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00283800
  slot 0 2 0 first
  slot 1 2 8 @6.2
# direct_copy
# 474 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<2> (parameter 1 offset 0, 2 dims), the captureless functor (parameter 1 offset 520) and the closure's tail (13 bytes from offset 523)
call 8 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_15gpu_kernel_implIZZZNS0_23direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE5_clEvEUlfE_EEvS4_RKT_EUliE_EEviT1_
  config 7188 1 1 128 1 1 0
  params 4 536
  bytes 0 0 00283800
  bytes 1 0 02000000400000000100000006000000a0e000003ae3c12310000000
  bytes 1 304 04000000020000000001000080010000
  slot 0 1 504 first
  slot 1 1 512 @5.1+128
  bytes 1 521 0605
# layer_norm
call 9 launch _ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28vectorized_layer_norm_kernelIffLb1EEEviT0_PKT_S6_S6_PS3_S7_PS4_
  config 57504 1 1 32 4 1 24
  params 4 4 8 8 8 8 8 8
  bytes 0 0 40000000
  bytes 1 0 acc52737
  slot 0 2 0 @8.0
  bytes 3 0 0000000000000000
  bytes 4 0 0000000000000000
  bytes 5 0 0000000000000000
  slot 1 6 0 @6.1
  slot 2 7 0 @7.1
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 10 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 3594 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00283800
  slot 0 2 0 first
  slot 1 2 8 @9.2
# mul
# 536 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<3> (parameter 1 offset 0, 3 dims), the closure's last word, a host address (parameter 1 offset 640)
call 11 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIN3c104HalfES5_S5_NS0_15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_
  config 5391 1 1 128 1 1 0
  params 4 648
  bytes 0 0 001e2a00
  bytes 1 0 03000000300000005655555506000000200000000100000005000000050700003ae3c1230b000000
  bytes 1 304 020000000200000002000000600000008000000000000000000c00000010000060000000
  slot 0 1 608 first
  slot 1 1 616 @7.0
  slot 2 1 624 first
  bytes 1 632 0300000004000000
# neg
# 468 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<2> (parameter 1 offset 0, 2 dims), the closure's last word, a host address (parameter 1 offset 528)
call 12 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastIZZZNS0_15neg_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE0_clEvENKUlvE6_clEvEUlN3c104HalfEE_EEvS4_RKT_EUliE_EEviT1_
  config 2696 1 1 128 1 1 0
  params 4 536
  bytes 0 0 000f1500
  bytes 1 0 02000000180000005655555505000000a0e000003ae3c12310000000
  bytes 1 304 02000000020000003000000080000000
  slot 0 1 504 first
  slot 1 1 512 @11.1+48
  bytes 1 520 0000000000000000
# cat
# word 1 696: 0 in some instances only: padding, masked
# word 1 704: 0 in some instances only: padding, masked
# 3286 bytes the kernel cannot read are masked: unused entries of CatArrInputTensorMetadata (parameter 1, 2 inputs), with 1 stale pointer(s)
call 13 launch _ZN2at6native40_GLOBAL__N__0f1a8107_8_Shape_cu_49f7391c19CatArrayBatchedCopyINS1_10OpaqueTypeILj2EEEjLi4ELi64ELi64EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16TensorSizeStrideIS8_Lj4EEEiS8_
  config 264 2 1 512 1 1 0
  params 8 3392 32 4 4
  slot 0 0 0 first
  slot 1 1 0 @12.0
  slot 2 1 8 @11.1
  bytes 1 512 0000000018000000
  bytes 1 768 1800000018000000
  bytes 1 1024 000f1500000f1500
  bytes 1 1280 0000
  bytes 1 1344 01000000050700002000000018000000000f15000003000018000000010000000100000005070000200000001800000000283800000800004000000001000000
  bytes 2 0 01000000050700002000000030000000001e2a00000600003000000001000000
  bytes 3 0 03000000
  bytes 4 0 01000000
# mul
# 536 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<3> (parameter 1 offset 0, 3 dims), the closure's last word, a host address (parameter 1 offset 640)
call 14 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIN3c104HalfES5_S5_NS0_15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_
  config 5391 1 1 128 1 1 0
  params 4 648
  bytes 0 0 001e2a00
  bytes 1 0 03000000300000005655555506000000200000000100000005000000050700003ae3c1230b000000
  bytes 1 304 020000000200000002000000600000006000000000000000000c0000000c000060000000
  slot 0 1 608 first
  slot 1 1 616 @13.0
  slot 2 1 624 first
  bytes 1 632 0300000004000000
# add
call 15 launch _ZN2at6native29vectorized_elementwise_kernelILi8ENS0_15CUDAFunctor_addIN3c104HalfEEESt5arrayIPcLm3EEEEviT0_T1_
  config 2696 1 1 128 1 1 0
  params 4 4 24
  bytes 0 0 001e2a00
  bytes 1 0 0000803f
  slot 0 2 0 first
  slot 1 2 8 @11.0
  slot 2 2 16 @14.0
# cat
# word 1 704: 0 in some instances only: padding, masked
# 3286 bytes the kernel cannot read are masked: unused entries of CatArrInputTensorMetadata (parameter 1, 2 inputs), with 1 stale pointer(s)
call 16 launch _ZN2at6native40_GLOBAL__N__0f1a8107_8_Shape_cu_49f7391c19CatArrayBatchedCopyINS1_10OpaqueTypeILj2EEEjLi4ELi64ELi64EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16TensorSizeStrideIS8_Lj4EEEiS8_
  config 264 2 1 512 1 1 0
  params 8 3392 32 4 4
  slot 0 0 0 first
  slot 1 1 0 @15.0
  slot 2 1 8 @12.1+48
  bytes 1 512 0000000030000000
  bytes 1 768 3000000010000000
  bytes 1 1024 001e2a00000a0e00
  bytes 1 1280 0000
  bytes 1 1344 01000000050700002000000030000000001e2a000006000030000000010000000100000005070000200000001000000000283800000800004000000001000000
  bytes 2 0 0100000005070000200000004000000000283800000800004000000001000000
  bytes 3 0 03000000
  bytes 4 0 01000000
# mul
# 536 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<3> (parameter 1 offset 0, 3 dims), the closure's last word, a host address (parameter 1 offset 640)
call 17 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIN3c104HalfES5_S5_NS0_15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_
  config 5391 1 1 128 1 1 0
  params 4 648
  bytes 0 0 001e2a00
  bytes 1 0 03000000300000005655555506000000200000000100000005000000050700003ae3c1230b000000
  bytes 1 304 020000000200000002000000600000008000000000000000000c00000010000060000000
  slot 0 1 608 first
  slot 1 1 616 @10.0
  slot 2 1 624 @11.2
  bytes 1 632 0300000004000000
# neg
# 468 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<2> (parameter 1 offset 0, 2 dims), the closure's last word, a host address (parameter 1 offset 528)
call 18 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastIZZZNS0_15neg_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE0_clEvENKUlvE6_clEvEUlN3c104HalfEE_EEvS4_RKT_EUliE_EEviT1_
  config 2696 1 1 128 1 1 0
  params 4 536
  bytes 0 0 000f1500
  bytes 1 0 02000000180000005655555505000000a0e000003ae3c12310000000
  bytes 1 304 02000000020000003000000080000000
  slot 0 1 504 first
  slot 1 1 512 @17.1+48
  bytes 1 520 0000000000000000
# cat
# word 1 704: 0 in some instances only: padding, masked
# 3286 bytes the kernel cannot read are masked: unused entries of CatArrInputTensorMetadata (parameter 1, 2 inputs), with 1 stale pointer(s)
call 19 launch _ZN2at6native40_GLOBAL__N__0f1a8107_8_Shape_cu_49f7391c19CatArrayBatchedCopyINS1_10OpaqueTypeILj2EEEjLi4ELi64ELi64EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16TensorSizeStrideIS8_Lj4EEEiS8_
  config 264 2 1 512 1 1 0
  params 8 3392 32 4 4
  slot 0 0 0 first
  slot 1 1 0 @18.0
  slot 2 1 8 @17.1
  bytes 1 512 0000000018000000
  bytes 1 768 1800000018000000
  bytes 1 1024 000f1500000f1500
  bytes 1 1280 0000
  bytes 1 1344 01000000050700002000000018000000000f15000003000018000000010000000100000005070000200000001800000000283800000800004000000001000000
  bytes 2 0 01000000050700002000000030000000001e2a00000600003000000001000000
  bytes 3 0 03000000
  bytes 4 0 01000000
# mul
# 536 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<3> (parameter 1 offset 0, 3 dims), the closure's last word, a host address (parameter 1 offset 640)
call 20 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIN3c104HalfES5_S5_NS0_15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_
  config 5391 1 1 128 1 1 0
  params 4 648
  bytes 0 0 001e2a00
  bytes 1 0 03000000300000005655555506000000200000000100000005000000050700003ae3c1230b000000
  bytes 1 304 020000000200000002000000600000006000000000000000000c0000000c000060000000
  slot 0 1 608 first
  slot 1 1 616 @19.0
  slot 2 1 624 @14.2
  bytes 1 632 0300000004000000
# add
call 21 launch _ZN2at6native29vectorized_elementwise_kernelILi8ENS0_15CUDAFunctor_addIN3c104HalfEEESt5arrayIPcLm3EEEEviT0_T1_
  config 2696 1 1 128 1 1 0
  params 4 4 24
  bytes 0 0 001e2a00
  bytes 1 0 0000803f
  slot 0 2 0 first
  slot 1 2 8 @17.0
  slot 2 2 16 @20.0
# cat
# word 1 704: 0 in some instances only: padding, masked
# 3286 bytes the kernel cannot read are masked: unused entries of CatArrInputTensorMetadata (parameter 1, 2 inputs), with 1 stale pointer(s)
call 22 launch _ZN2at6native40_GLOBAL__N__0f1a8107_8_Shape_cu_49f7391c19CatArrayBatchedCopyINS1_10OpaqueTypeILj2EEEjLi4ELi64ELi64EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16TensorSizeStrideIS8_Lj4EEEiS8_
  config 264 2 1 512 1 1 0
  params 8 3392 32 4 4
  slot 0 0 0 first
  slot 1 1 0 @21.0
  slot 2 1 8 @18.1+48
  bytes 1 512 0000000030000000
  bytes 1 768 3000000010000000
  bytes 1 1024 001e2a00000a0e00
  bytes 1 1280 0000
  bytes 1 1344 01000000050700002000000030000000001e2a000006000030000000010000000100000005070000200000001000000000283800000800004000000001000000
  bytes 2 0 0100000005070000200000004000000000283800000800004000000001000000
  bytes 3 0 03000000
  bytes 4 0 01000000
# cudnn
# uid 5: not a device address in every instance (a pointer to a host scalar, say): not compared
call 23 cudnn
  uids 3 5 0 1 2
  slot 0 uid:3 0 first
  slot 1 uid:0 0 @16.0
  slot 2 uid:1 0 @22.0
  slot 3 uid:2 0 @8.1+128
# nan_to_num
# 8 bytes the kernel cannot read are masked: the closure's last word, a host address (parameter 1 offset 8)
call 24 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZZZNS0_22nan_to_num_kernel_cudaERNS_18TensorIteratorBaseESt8optionalIdES5_S5_ENKUlvE0_clEvENKUlvE1_clEvEUlN3c104HalfEE_St5arrayIPcLm2EEEEviT0_T1_
  config 3594 1 1 128 1 1 0
  params 4 16 16
  bytes 0 0 00283800
  bytes 1 0 0000ff7bfffb0000
  slot 0 2 0 first
  slot 1 2 8 @23.0
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 25 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 2 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00080000
  slot 0 2 0 first
  slot 1 2 8 first
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 26 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 4096 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00004000
  slot 0 2 0 first
# matmul m=2048 n=1797 k=2048
call 27 matmul
  desc compute=68 scale=0 transa=1 transb=0 epilogue=4 bias_type=-1 m=2048 n=1797 k=2048 workspace=1048576 a.type=2 a.order=0 a.rows=2048 a.cols=2048 a.ld=2048 a.batch=1 a.stride=0 b.type=2 b.order=0 b.rows=2048 b.cols=1797 b.ld=2048 b.batch=1 b.stride=0 c.type=2 c.order=0 c.rows=2048 c.cols=1797 c.ld=2048 c.batch=1 c.stride=0 d.type=2 d.order=0 d.rows=2048 d.cols=1797 d.ld=2048 d.batch=1 d.stride=0
  algo id=66 tile=415 stages=35 splitk=1 reduction=0 swizzle=0 custom=5 cluster=3 inner=0
  slot 0 A 0 @26.0
  slot 1 B 0 @24.0
  slot 2 C 0 first
  slot 3 D 0 first
  slot 4 bias 0 @25.0
# mul
# 560 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<3> (parameter 1 offset 0, 2 dims), the closure's last word, a host address (parameter 1 offset 640), with 1 stale pointer(s)
call 28 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_15gpu_kernel_implINS0_13BinaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_
  config 7188 1 1 128 1 1 0
  params 4 648
  bytes 0 0 00283800
  bytes 1 0 0200000000080000010000000b000000050700003ae3c1230b000000
  bytes 1 304 040000000200000004000000002000000010000000000000
  slot 0 1 608 first
  slot 1 1 616 @27.3
  slot 2 1 624 first
  bytes 1 632 0306050604000000
# add
call 29 launch _ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_
  config 3594 1 1 128 1 1 0
  params 4 4 24
  bytes 0 0 00283800
  bytes 1 0 0000803f
  slot 0 2 0 first
  slot 1 2 8 @0.0
  slot 2 2 16 @28.0
# layer_norm
call 30 launch _ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28vectorized_layer_norm_kernelIffLb1EEEviT0_PKT_S6_S6_PS3_S7_PS4_
  config 1797 1 1 32 4 1 24
  params 4 4 8 8 8 8 8 8
  bytes 0 0 00080000
  bytes 1 0 acc52737
  slot 0 2 0 @29.0
  slot 1 3 0 first
  bytes 4 0 0000000000000000
  bytes 5 0 0000000000000000
  slot 2 6 0 first
  slot 3 7 0 first
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 31 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 16 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00400000
  slot 0 2 0 first
  slot 1 2 8 first
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 32 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 32768 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00000002
  slot 0 2 0 first
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 33 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 3594 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00283800
  slot 0 2 0 first
  slot 1 2 8 @30.3
# matmul m=16384 n=1797 k=2048
call 34 matmul
  desc compute=68 scale=0 transa=1 transb=0 epilogue=4 bias_type=-1 m=16384 n=1797 k=2048 workspace=1048576 a.type=2 a.order=0 a.rows=2048 a.cols=16384 a.ld=2048 a.batch=1 a.stride=0 b.type=2 b.order=0 b.rows=2048 b.cols=1797 b.ld=2048 b.batch=1 b.stride=0 c.type=2 c.order=0 c.rows=16384 c.cols=1797 c.ld=16384 c.batch=1 c.stride=0 d.type=2 d.order=0 d.rows=16384 d.cols=1797 d.ld=16384 d.batch=1 d.stride=0
  algo id=66 tile=501 stages=35 splitk=1 reduction=0 swizzle=0 custom=7 cluster=5 inner=0
  slot 0 A 0 @32.0
  slot 1 B 0 @33.0
  slot 2 C 0 first
  slot 3 D 0 first
  slot 4 bias 0 @31.0
# silu
# 468 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<2> (parameter 1 offset 0, 2 dims), the closure's last word, a host address (parameter 1 offset 528)
call 35 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastIZZZNS0_62_GLOBAL__N__7d4ed096_23_ActivationSiluKernel_cu_751192d7_1559511silu_kernelERNS_18TensorIteratorBaseEENKUlvE_clEvENKUlvE3_clEvEUlN3c104HalfEE_EEvS5_RKT_EUliE_EEviT1_
  config 28752 1 1 128 1 1 0
  params 4 536
  bytes 0 0 00a0e000
  bytes 1 0 0200000000200000010000000d000000050700003ae3c1230b000000
  bytes 1 304 02000000020000000040000000800000
  slot 0 1 504 first
  slot 1 1 512 @34.3
  bytes 1 520 0000000000000000
# mul
# 560 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<3> (parameter 1 offset 0, 2 dims), the closure's last word, a host address (parameter 1 offset 640)
call 36 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIN3c104HalfES5_S5_NS0_15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_
  config 28752 1 1 128 1 1 0
  params 4 648
  bytes 0 0 00a0e000
  bytes 1 0 0200000000200000010000000d000000050700003ae3c1230b000000
  bytes 1 304 020000000200000002000000004000000040000000800000
  slot 0 1 608 first
  slot 1 1 616 @35.0
  slot 2 1 624 @35.1+16384
  bytes 1 632 0300000004000000
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 37 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 2 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00080000
  slot 0 2 0 first
  slot 1 2 8 first
# float16_copy
# 1 bytes the kernel cannot read are masked: the captureless functor (parameter 1)
call 38 launch _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_
  config 16384 1 1 128 1 1 0
  params 4 1 16
  bytes 0 0 00000001
  slot 0 2 0 first
# matmul m=2048 n=1797 k=8192
call 39 matmul
  desc compute=68 scale=0 transa=1 transb=0 epilogue=4 bias_type=-1 m=2048 n=1797 k=8192 workspace=1048576 a.type=2 a.order=0 a.rows=8192 a.cols=2048 a.ld=8192 a.batch=1 a.stride=0 b.type=2 b.order=0 b.rows=8192 b.cols=1797 b.ld=8192 b.batch=1 b.stride=0 c.type=2 c.order=0 c.rows=2048 c.cols=1797 c.ld=2048 c.batch=1 c.stride=0 d.type=2 d.order=0 d.rows=2048 d.cols=1797 d.ld=2048 d.batch=1 d.stride=0
  algo id=66 tile=415 stages=35 splitk=1 reduction=0 swizzle=0 custom=5 cluster=3 inner=0
  slot 0 A 0 @38.0
  slot 1 B 0 @36.0
  slot 2 C 0 first
  slot 3 D 0 first
  slot 4 bias 0 @37.0
# mul
# 560 bytes the kernel cannot read are masked: unused entries of OffsetCalculator<3> (parameter 1 offset 0, 2 dims), the closure's last word, a host address (parameter 1 offset 640)
call 40 launch _ZN2at6native18elementwise_kernelILi128ELi4EZNS0_15gpu_kernel_implINS0_13BinaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_
  config 7188 1 1 128 1 1 0
  params 4 648
  bytes 0 0 00283800
  bytes 1 0 0200000000080000010000000b000000050700003ae3c1230b000000
  bytes 1 304 040000000200000004000000002000000010000000000000
  slot 0 1 608 @3.1
  slot 1 1 616 @39.3
  slot 2 1 624 first
  bytes 1 632 0306050604000000
# add
call 41 launch _ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_
  config 3594 1 1 128 1 1 0
  params 4 4 24
  bytes 0 0 00283800
  bytes 1 0 0000803f
  slot 0 2 0 first
  slot 1 2 8 @30.0
  slot 2 2 16 @40.0
end
