"""Learning-rate schedules, as torch.optim.lr_scheduler: each ``step()``
sets ``group["lr"]`` of the optimizer's groups (the optimizer turns a new
value into a 0-d tensor on the workers, so a schedule costs no
recompilation)."""
import math

__all__ = ["LRScheduler", "LambdaLR", "CosineAnnealingLR", "CosineWithWarmupLR",
           "get_cosine_schedule_with_warmup"]


class LRScheduler:
    """Base class: subclasses define ``get_lr()`` from ``last_epoch`` and
    ``base_lrs``; ``step()`` advances the epoch and sets the groups' lr."""

    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   "when resuming an optimizer")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self):
        raise NotImplementedError

    def get_last_lr(self):
        return self._last_lr

    def step(self, epoch=None):
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch) (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        if not isinstance(lr_lambda, (list, tuple)):
            self.lr_lambdas = [lr_lambda] * n
        else:
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
    (the closed form of torch's schedule)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self.eta_min + (base - self.eta_min) *
                (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


def _cosine_with_warmup(num_warmup_steps, num_training_steps, num_cycles, min_lr_ratio):
    def factor(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        progress = float(step - num_warmup_steps) / float(
            max(1, num_training_steps - num_warmup_steps))
        cosine = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * min(progress, 1.0)))
        return min_lr_ratio + (1.0 - min_lr_ratio) * max(0.0, cosine)
    return factor


class CosineWithWarmupLR(LambdaLR):
    """Linear warmup from 0 over ``num_warmup_steps``, then a cosine decay to
    ``min_lr_ratio * base_lr`` at ``num_training_steps`` (the schedule of
    transformers' ``get_cosine_schedule_with_warmup``, with a floor)."""

    def __init__(self, optimizer, num_warmup_steps, num_training_steps, num_cycles=0.5,
                 min_lr_ratio=0.0, last_epoch=-1):
        if num_training_steps < num_warmup_steps:
            raise ValueError("num_training_steps must be at least num_warmup_steps")
        self.num_warmup_steps = num_warmup_steps
        self.num_training_steps = num_training_steps
        super().__init__(optimizer, _cosine_with_warmup(num_warmup_steps, num_training_steps,
                                                        num_cycles, min_lr_ratio), last_epoch)


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps,
                                    num_cycles=0.5, last_epoch=-1):
    """A `LambdaLR` with the cosine-with-warmup factor (transformers' name)."""
    return LambdaLR(optimizer, _cosine_with_warmup(num_warmup_steps, num_training_steps,
                                                   num_cycles, 0.0), last_epoch)
