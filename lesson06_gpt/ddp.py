"""Lesson 6, section 12: the same training in several processes, one GPU each, under torchrun.

    torchrun --nproc_per_node=2 lesson06_gpt/ddp.py --steps 50            (two GPUs, NCCL)
    torchrun --nproc_per_node=2 lesson06_gpt/ddp.py --steps 1 --size toy  (no GPU: two CPU processes, gloo)

Each process builds the model from the same seed (DDP also broadcasts rank 0's weights at the
start), draws its own batches (its rank seeds them), and DistributedDataParallel averages the
gradients across processes during the backward, bucket by bucket, while later layers' gradients are
still being computed. Then every process takes the same optimizer step and the replicas stay equal.
The course's ops need nothing for this: they are autograd functions, and DDP only sees parameters and
their gradients. It imports the model and the data (model.py, data.py), not the chapter.
"""
import argparse
import os
import time

from common.device import DEVICE, INTERPRET

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from common.chapter import positive_int
from lesson06_gpt.data import batch, load_bytes, split
from lesson06_gpt.model import GPT, GPT2_SMALL, TOY, optimizer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive_int, default=20, help="training steps (default 20)")
    parser.add_argument("--batch", type=positive_int, default=None,
                        help="windows per process per step (default 8; toy: 2)")
    parser.add_argument("--ops", default="course", choices=["course", "torch"], help="the op set (default course)")
    parser.add_argument("--size", default="toy" if INTERPRET else "gpt2", choices=["toy", "gpt2"],
                        help="the toy model or GPT-2 small's size (default: toy on the CPU, gpt2 on GPUs)")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        raise SystemExit("run me under torchrun: torchrun --nproc_per_node=2 lesson06_gpt/ddp.py")
    dist.init_process_group("gloo" if INTERPRET else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if not INTERPRET:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    config = TOY if args.size == "toy" else GPT2_SMALL
    size = args.batch or (2 if args.size == "toy" else 8)
    model = GPT(config, args.ops, seed=0)
    replica = DistributedDataParallel(model, device_ids=None if INTERPRET else [torch.cuda.current_device()])
    opt = optimizer(model)
    train, _ = split(load_bytes())
    gen = torch.Generator().manual_seed(1000 + rank)  # each process its own batches
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = replica(*batch(train, size, config.seq, gen))
        loss.backward()  # DDP's hooks average the gradients across the processes
        opt.step()
        opt.zero_grad()
        if step == 1:
            first = loss.item()  # this process's own batch
        if rank == 0 and (step == 1 or step == args.steps or step % 10 == 0):
            print(f"step {step}: loss {loss.item():.4f} (rank 0's batch)", flush=True)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    checksum = sum(p.double().sum().item() for p in model.parameters())
    print(f"rank {rank} of {world}: first loss {first:.6f}, parameters' sum {checksum:.10f}", flush=True)
    if rank == 0:
        print(f"{world} processes x {size} x {config.seq} tokens x {args.steps} steps in {seconds:.1f} s: "
              f"{world * size * config.seq * args.steps / seconds:,.0f} tokens/s (the first steps' compilation "
              "included)")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
