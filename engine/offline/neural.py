"""A neural network in the offline library: a PyTorch mixture of experts whose learnable sigmoid
gates split the input space, for tasks that allow a network and whose target jumps.

Each expert is a small smooth network; the gates are sigmoids of a boundary (a hyperplane, or a
curve with gate="mlp") times a learnable sharpness, so a gate can grow as steep as a step where
the data jumps while every expert stays smooth on its own side: the mixture represents a jump
that a single smooth network can only smear (one of the strategies the AgenticSciML agents
arrived at on discontinuous functions). The gates split the space in turn (stick-breaking), so K
experts need K - 1 gates.

The program trains in epochs, which the frame's fit-then-refit main() does not fit: it trains on
the fit rows, validates after every epoch and predicts with the weights of its best epoch. The
part a training job watches is separate and small: ``report()`` prints one JSON line per epoch
(``{"trellis_metric": {"epoch", "loss", "val", "lr"}}``), a checkpoint (model, optimizer,
schedule, shuffling state, best weights, epoch) is written to checkpoint.pt every few epochs,
and a run that finds checkpoint.pt made with the same data and settings resumes after its epoch;
killed and resumed, it ends with the predictions of an uninterrupted run (on the CPU). The
program imports Trellis's ``trellis_train`` helper (engine/training/), so Trellis runs it as a
training job: each epoch is also a point of its live curves (``tt.report``), each checkpoint is
kept by the job (``tt.saving``) and handed back when the job resumes (``tt.resume_path``), and
the device is the one the job was given (``tt.device``). Run on its own, without the helper, it
does as above.

Deterministic for its seed (torch.manual_seed, deterministic algorithms, one thread); on the GPU
when torch.cuda.is_available(), with the same code. The sandbox hides GPUs, so there it trains
on the CPU. A task opts in (``Strategy.requires`` names torch, which TaskFacts.allows grants only
where the task allows a network).

Imported by strategies.py once its helpers exist; not meant to be imported on its own.
"""
from __future__ import annotations

from .strategy import ONE_D, TABULAR, Strategy, make_strategy

CHECKPOINT_FILE = "checkpoint.pt"

_MODEL = '''
EXPERTS = $experts  # smooth sub-networks; the gates give each its region of the input space
HIDDEN = $hidden  # width of each expert's two hidden layers
GATE = $gate  # "linear": each gate's boundary is a hyperplane; "mlp": a curve
EPOCHS = $epochs
BATCH_SIZE = $batch_size
LEARNING_RATE = $learning_rate  # Adam's, decayed to 0 over EPOCHS by a cosine schedule
CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_EVERY = 5  # epochs between checkpoints

try:  # Trellis's training-job helper, put beside the program when Trellis runs it as a job
    import trellis_train as tt
except ImportError:  # run on its own (benchmarks/gpu_check.py): stdout lines, checkpoint.pt here
    tt = None

# The same code on the CPU and a GPU; deterministic kernels on either (cuBLAS needs a fixed workspace).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
DEVICE = torch.device(tt.device() if tt else "cuda" if torch.cuda.is_available() else "cpu")


# --- what a training job reads: one metrics line per epoch, checkpoints, resume -----------------
def report(epoch, loss, val, lr):
    """One JSON line per epoch: training loss (standardised target), validation RMSE, learning rate;
    as a job, also a point of its live curves (epochs counted from 0 there)."""
    print(json.dumps({"trellis_metric": {"epoch": epoch, "loss": round(loss, 8), "val": round(val, 8),
                                         "lr": lr}}), flush=True)
    if tt:
        tt.report(epoch=epoch - 1, epochs=EPOCHS, loss=loss, val=val, lr=lr)


def run_fingerprint(X, y):
    """What a checkpoint must have been made with to be resumed: these rows and these settings."""
    rows = pd.util.hash_pandas_object(pd.DataFrame(np.column_stack([X, y])), index=True).to_numpy()
    digest = int(np.bitwise_xor.reduce(rows))  # each row's hash mixes in its position
    return f"{digest:016x} seed={SEED} {EXPERTS}x{HIDDEN} {GATE} {EPOCHS} {BATCH_SIZE} {LEARNING_RATE}"


def save_checkpoint(state):
    """Write the checkpoint whole or not at all: a run killed mid-write keeps the previous one.
    As a job, Trellis keeps it and hands it back when the job resumes."""
    if tt:
        with tt.saving(CHECKPOINT_FILE, epoch=state["epoch"] - 1) as path:
            torch.save(state, path)
        return
    torch.save(state, CHECKPOINT_FILE + ".tmp")
    os.replace(CHECKPOINT_FILE + ".tmp", CHECKPOINT_FILE)


def load_checkpoint(fingerprint):
    """The training state to resume from; None without a checkpoint or with one of other data or settings."""
    path = (tt.resume_path(CHECKPOINT_FILE) if tt else None) or CHECKPOINT_FILE
    if not os.path.exists(path):
        return None
    state = torch.load(path, map_location=DEVICE, weights_only=True)  # tensors only, no code
    if state.get("fingerprint") != fingerprint:
        print(f"checkpoint: {CHECKPOINT_FILE} was made with other data or settings; training from scratch")
        return None
    return state


# --- the model ---------------------------------------------------------------------------------
def smooth_net(n_inputs, width, n_outputs):
    return nn.Sequential(nn.Linear(n_inputs, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                         nn.Linear(width, n_outputs))


class MixtureOfExperts(nn.Module):
    """Experts blended by sigmoid gates: gate j = sigmoid(sharpness_j * boundary_j(x)), learnable
    both. Expert j takes gate j's share of what the gates before it left, the last expert the rest."""

    def __init__(self, n_inputs):
        super().__init__()
        self.experts = nn.ModuleList(smooth_net(n_inputs, HIDDEN, 1) for _ in range(EXPERTS))
        n_gates = EXPERTS - 1
        self.boundaries = nn.Linear(n_inputs, n_gates) if GATE == "linear" else smooth_net(n_inputs, 16, n_gates)
        self.log_sharpness = nn.Parameter(torch.full((n_gates,), 1.6))  # e^1.6 = 5: soft at first

    def shares(self, x):
        gates = torch.sigmoid(torch.exp(self.log_sharpness) * self.boundaries(x))
        ones = torch.ones_like(x[:, :1])
        remaining = torch.cumprod(torch.cat([ones, 1.0 - gates], dim=1), dim=1)
        return torch.cat([gates, ones], dim=1) * remaining

    def forward(self, x):
        outputs = torch.cat([expert(x) for expert in self.experts], dim=1)
        return (self.shares(x) * outputs).sum(dim=1)


class Scaler:
    """Standardises inputs and target with the fit rows' mean and spread."""

    def __init__(self, X, y):
        self.x_mean, self.x_std = X.mean(axis=0), np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
        self.y_mean, self.y_std = float(y.mean()), float(y.std()) or 1.0

    def inputs(self, X):
        return torch.tensor((X - self.x_mean) / self.x_std, dtype=torch.float32, device=DEVICE)

    def target(self, y):
        return torch.tensor((y - self.y_mean) / self.y_std, dtype=torch.float32, device=DEVICE)

    def predict(self, model, X):
        model.eval()
        with torch.no_grad():
            z = model(self.inputs(X)).double().cpu().numpy()
        model.train()
        return z * self.y_std + self.y_mean


def train_epoch(model, optimizer, x, t, shuffle):
    """One pass over the fit rows in shuffled mini-batches; the mean batch loss."""
    order = torch.randperm(len(x), generator=shuffle).to(DEVICE)
    total = torch.zeros((), device=DEVICE)  # summed on the device: no GPU sync per batch
    for start in range(0, len(x), BATCH_SIZE):
        batch = order[start:start + BATCH_SIZE]
        optimizer.zero_grad()
        loss = torch.mean((model(x[batch]) - t[batch]) ** 2)
        loss.backward()
        optimizer.step()
        total += loss.detach() * len(batch)
    return float(total) / len(x)


def expert_use(model, scale, X):
    """Share of rows each expert dominates: how the gates split the data."""
    with torch.no_grad():
        owner = model.shares(scale.inputs(X)).argmax(dim=1).cpu().numpy()
    return [round(float(np.mean(owner == k)), 3) for k in range(EXPERTS)]
'''

_MAIN = '''
def main():
    start = time.perf_counter()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    X, y, X_test, ids = load_data()
    print(f"train_rows: {X.shape[0]}  features: {X.shape[1]}  test_rows: {len(ids)}  device: {DEVICE}")

    # Train on the fit rows, validate on the rest after every epoch, keep the best epoch's weights.
    fit_rows, val_rows = holdout_split(X, X_test, SEED)
    scale = Scaler(X[fit_rows], y[fit_rows])
    x_fit, t_fit = scale.inputs(X[fit_rows]), scale.target(y[fit_rows])
    model = MixtureOfExperts(X.shape[1]).to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    shuffle = torch.Generator().manual_seed(SEED)
    fingerprint = run_fingerprint(X, y)
    best_val, best_weights, first = float("inf"), None, 1
    state = load_checkpoint(fingerprint)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        shuffle.set_state(state["shuffle"])
        best_val, best_weights, first = state["best_val"], state["best_weights"], state["epoch"] + 1
        print(f"checkpoint: resumed after epoch {state['epoch']} of {EPOCHS}")

    for epoch in range(first, EPOCHS + 1):
        lr = schedule.get_last_lr()[0]
        loss = train_epoch(model, optimizer, x_fit, t_fit, shuffle)
        schedule.step()
        residual = scale.predict(model, X[val_rows]) - y[val_rows]
        val = float(np.sqrt(np.mean(residual ** 2)))
        report(epoch, loss, val, lr)
        if val < best_val:
            best_val = val
            best_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if epoch % CHECKPOINT_EVERY == 0 or epoch == EPOCHS:
            save_checkpoint({"fingerprint": fingerprint, "epoch": epoch, "model": model.state_dict(),
                             "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                             "shuffle": shuffle.get_state(), "best_val": best_val, "best_weights": best_weights})

    if best_weights is not None:
        model.load_state_dict(best_weights)
    print(f"experts: share of training rows each one takes: {expert_use(model, scale, X)}")
    report_scores(y[val_rows], within_bounds(scale.predict(model, X[val_rows])))
    predictions = as_contract(within_bounds(scale.predict(model, X_test)))
    out = pd.DataFrame({ID_COLUMN: ids, TARGET: predictions})
    out.to_csv(PREDICTIONS_FILE, index=False)
    check_predictions(len(ids))
    print(f"wrote {len(out)} predictions to {PREDICTIONS_FILE}")
    print(f"elapsed_seconds: {time.perf_counter() - start:.2f}")
'''

NEURAL: tuple[Strategy, ...] = (
    make_strategy(
        "mixture_of_experts", "Mixture of experts with learnable sigmoid gates (PyTorch)", (ONE_D, TABULAR),
        "neural discontinuity piecewise scaling",
        {"experts": (4, 3, 6), "hidden": (32, 64), "gate": ("linear", "mlp"), "epochs": (300, 500, 200),
         "batch_size": (64, 32), "learning_rate": (0.005, 0.01)},
        """
        Small tanh networks (the experts) blended by learnable sigmoid gates: each gate is a
        sigmoid of a boundary (a hyperplane, or a curve with gate="mlp") times a learnable
        sharpness, and the gates split the input space in turn, so the blend can jump where the
        data jumps while each expert stays smooth on its side. Trained with Adam and a cosine
        schedule on standardised inputs and target, validated after every epoch (one JSON line
        each); the best epoch's weights predict. Checkpoints go to checkpoint.pt every few
        epochs, and a run resumes from one made with the same data and settings.
        """,
        ("import json", "import torch", "from torch import nn"),
        _MODEL,
        requires=("torch",),
        main=_MAIN,
    ),
)
