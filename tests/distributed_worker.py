"""One training process for tests/test_distributed.py and tests/test_jax_distributed.py (run
as a script, TF_CONFIG and KERAS_BACKEND set by the test).

    python tests/distributed_worker.py EXPERIMENT OUTPUT DISTRIBUTION STEPS DUMP.npz [--resume]

Trains like `mtl train`, with `steps` overridden, then writes every state variable
(model + optimizer, the checkpoint's order) of this process to DUMP.npz.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(experiment, output, distribution, steps, dump, *flags):
    start, cpu = time.time(), time.process_time()
    import numpy as np

    from mtl_framework.loop.run import Run  # noqa: E402 (after sys.path)

    run = Run(experiment, output, log=lambda *a: None, distribution=distribution)
    run.experiment.raw["steps"] = int(steps)  # constant learning rate: steps only says when to stop
    run.train(resume="--resume" in flags)
    np.savez(dump, **{f"v{i:05d}": np.asarray(v.numpy())
                      for i, v in enumerate(run.model.state_variables)})
    print(f"done: chief={run.is_chief} wall={time.time() - start:.1f}s "
          f"cpu={time.process_time() - cpu:.1f}s", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
