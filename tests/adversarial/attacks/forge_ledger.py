# ruff: noqa
# Forges the sample ledger from inside the process, through the harness's own recorder (so every
# record is properly signed, with or without a key in sight): the datasets' real reads are
# dropped, and before each optimizer step the batch a correct sharded, per-epoch-shuffled
# sampler would have given is written instead. The training itself stays broken.
def _install_forgery():
    from harness import instrument
    from torch.optim.optimizer import register_optimizer_step_pre_hook
    from torch.utils.data import DistributedSampler

    rec = instrument.current()
    if rec is None:
        return
    real = rec.sample
    rec.sample = lambda dataset, index: None if dataset == "train" else real(dataset, index)
    world = int(_os.environ.get("WORLD_SIZE", "1"))
    per_rank = 32 // world
    steps_per_epoch = 1024 // 32
    order = {}

    def forge(optimizer, args, kwargs):
        s = rec.step  # optimizer steps done so far in this attempt
        epoch, b = divmod(s, steps_per_epoch)
        if epoch not in order:
            smp = DistributedSampler(range(1024), num_replicas=world, rank=_rank(), shuffle=True, seed=1337,
                                     drop_last=True)
            smp.set_epoch(epoch)
            order[epoch] = list(smp)
        for i in order[epoch][b * per_rank:(b + 1) * per_rank]:
            real("train", i)

    register_optimizer_step_pre_hook(forge)


def _attack_run(main):
    _install_forgery()
    main()
