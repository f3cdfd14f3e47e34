"""A scikit-learn classifier trained by DP-SGD: ``TorchClassifier`` (fit / predict / predict_proba)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin

from privml._params import keep_params
from privml._validation import check_epsilon, check_fitted, check_positive, check_positive_delta
from privml.accounting._dpsgd import check_dpsgd_options, planned_steps
from privml.accounting._events import DpEvent
from privml.budget import charged_fit
from privml.data._labels import fit_classes
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring
from privml.torch._dpsgd import DPSGD
from privml.torch._dpsgd_setup import check_precisions
from privml.torch.models import IMAGE_ARCHITECTURES, build_model

#: Defaults of Tramer and Boneh (2021), Table 9, for the end-to-end MNIST CNN:
#: expected batch 512, 40 epochs, SGD with learning rate 0.5 and momentum 0.9, C = 0.1.
DEFAULT_BATCH_SIZE = 512
DEFAULT_EPOCHS = 40.0
DEFAULT_LEARNING_RATE = 0.5
DEFAULT_MOMENTUM = 0.9
DEFAULT_CLIP_NORM = 0.1


class TorchClassifier(ClassifierMixin, BaseEstimator):
    """A CNN classifier trained with DP-SGD, usable wherever scikit-learn expects an estimator.

    ``fit(X, y)`` trains a fresh model of architecture ``model`` with
    :class:`~privml.torch.DPSGD` (Poisson sampling, flat clipping, Gaussian
    noise, PLD or RDP accounting); ``predict`` and ``predict_proba`` run it
    on new rows. X may be images ``(n, *input_shape)`` or flat rows
    ``(n, prod(input_shape))``; inputs are used as given (standardise them
    with public constants first, e.g. :func:`privml.torch._data.load_images`).

    Parameters
    ----------
    epsilon:
        Target epsilon (required); the noise multiplier is calibrated to it. ``None``
        with ``noise_multiplier`` given trains with that noise and reports
        the epsilon spent; ``float("inf")`` trains without noise or
        clipping (the non-private baseline; ``privacy_`` says epsilon = inf).
    delta:
        delta of the guarantee.
    model:
        ``"tramer-boneh"`` (default) or ``"resnet"`` (:mod:`privml.torch.models`).
    input_shape:
        Shape of one example (default ``(1, 28, 28)``).
    classes:
        The public class set. If None it is read from ``y``, which leaks
        (a :class:`~privml.exceptions.PrivacyLeakWarning` says so).
    epochs, batch_size, learning_rate, momentum, clip_norm:
        DP-SGD hyper-parameters (defaults of Tramer and Boneh 2021 for MNIST);
        ``batch_size`` is the *expected* Poisson batch size, at most n (a larger one is refused at fit);
        None (default) is 512, or n when n is smaller (n is public to DP-SGD, as its sampling rate b / n is).
    noise_multiplier, accountant, mode, secure_noise:
        As in :class:`~privml.torch.DPSGD`.
    max_physical_batch_size:
        As in :class:`~privml.torch.DPSGD`; ``"auto"`` (default) is 256 on the
        CPU (memory) and the whole logical batch on a GPU (speed).
    neighbouring, sampling, replace_one_bound:
        As in :class:`~privml.torch.DPSGD`: ``"add/remove-one"`` (default) or
        ``"replace-one"``; ``"poisson"`` (default) or ``"fixed-size"``
        (exactly ``batch_size`` records without replacement per step,
        replace-one and ``accountant="rdp"`` only); ``"tight"`` (default) or
        ``"group"``.
    device:
        Where to train and predict: ``"auto"`` (default: CUDA when available,
        else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``. The data are moved
        there once; sampling, noise and every buffer of a step stay there. A
        model file does not depend on it.
    precision:
        ``"fp32"`` (default) or ``"bf16"`` (autocast forward and backward;
        clipping and noise in float32), as in :class:`~privml.torch.DPSGD`.
    clip_precision:
        ``"fp32"`` (default) or ``"tf32"``: the arithmetic of the norms and
        the clipped sum, as in :class:`~privml.torch.DPSGD` (``"tf32"`` needs
        ghost clipping and gains only on GPUs with TF32 tensor cores).
    cuda_graph:
        Replay each step as a CUDA graph over the batch padded to a public
        capacity (:mod:`privml.torch._graphs`; the same release, fewer host
        launches). ``"auto"`` (default) uses one on a CUDA device in ghost
        mode with whole-batch steps when the step is small enough to gain,
        or always with fixed-size batches, which need no padding
        (:func:`privml.torch._graphs.graph_pays_off`); ``False`` never.
    random_state:
        Seed of the initial weights, sampling and noise (None: OS entropy).
    progress:
        Show a progress bar with the epsilon spent (stderr).
    threads:
        Torch intra-op threads during fit/predict (None: leave torch's setting).

    Attributes
    ----------
    module_:
        The trained ``torch.nn.Module``.
    classes_:
        The class labels (column order of ``predict_proba``).
    privacy_:
        (epsilon spent, delta) under ``neighbouring``.
    fit_info_:
        Data-independent facts about the run (:meth:`DPSGD.info`).

    Notes
    -----
    Privacy: (epsilon, delta)-DP under add/remove-one neighbours of the
    training set (default), by DP-SGD (Abadi et al. 2016) with sensitivity C
    of the clipped sum and the sampled Gaussian accounting of Mironov, Talwar
    and Zhang (2019); or under replace-one neighbours (sensitivity 2C when
    the replaced record is sampled), by the analyses listed in
    :mod:`privml.torch._dpsgd`. Disjoint-part ensembles (subsample-and-aggregate) can fit
    one TorchClassifier per part; prediction is post-processing.
    """

    input_shape: tuple[int, ...]  # a hyper-parameter (keep_params), made a tuple of ints when a model file is read

    @property
    def method(self) -> str:
        """What a model file of this estimator holds: ``"dpsgd-cnn"``, or ``"nonprivate-cnn"`` for ``epsilon=inf``.

        The non-private baseline's weights are no DP release: its file is a
        baseline's (:mod:`privml.registry`), served only through a private
        prediction method, never as a privately trained model.
        """
        return "nonprivate-cnn" if self.epsilon is not None and np.isinf(float(self.epsilon)) else "dpsgd-cnn"

    #: the engine's data-independent facts (DPSGD.info) and the baseline's step count
    released_info = frozenset({
        "noise_multiplier", "noise_std", "clip_norm", "sample_rate", "expected_batch_size", "steps",
        "planned_steps", "epochs", "mode", "accountant", "epsilon", "delta", "neighbouring", "world_size",
        "secure_noise", "sampling", "bound", "precision", "clip_precision",
    })

    def __init__(
        self,
        *,
        epsilon: float | None,
        delta: float = 1e-5,
        model: str = "tramer-boneh",
        input_shape: tuple[int, ...] = (1, 28, 28),
        classes: Any = None,
        epochs: float = DEFAULT_EPOCHS,
        batch_size: int | None = None,
        learning_rate: float = DEFAULT_LEARNING_RATE,
        momentum: float = DEFAULT_MOMENTUM,
        clip_norm: float = DEFAULT_CLIP_NORM,
        noise_multiplier: float | None = None,
        accountant: str = "pld",
        neighbouring: str = "add/remove-one",
        sampling: str = "poisson",
        replace_one_bound: str = "tight",
        mode: str = "auto",
        max_physical_batch_size: int | str | None = "auto",
        secure_noise: bool = False,
        device: str = "auto",
        precision: str = "fp32",
        clip_precision: str = "fp32",
        cuda_graph: bool | str = "auto",
        random_state: int | None = None,
        progress: bool = False,
        threads: int | None = None,
    ) -> None:
        keep_params(self, locals())

    # ------------------------------------------------------------ helpers
    def _images(self, X: Any) -> torch.Tensor:
        shape = tuple(int(s) for s in self.input_shape)
        array = np.asarray(X, dtype=np.float32)
        if array.ndim < 2 or int(np.prod(array.shape[1:])) != int(np.prod(shape)):
            raise ValueError(f"X must have shape (n, {shape}) or (n, {int(np.prod(shape))}), got {array.shape}")
        if not np.all(np.isfinite(array)):
            raise ValueError("X contains NaN or infinity")
        return torch.from_numpy(np.ascontiguousarray(array.reshape((-1, *shape))))

    def _labels(self, y: Any) -> tuple[np.ndarray, torch.Tensor]:
        """The public class set and each label's code (privml.data._labels: one encoder for every estimator)."""
        classes, codes = fit_classes(
            np.asarray(y), None if self.classes is None else list(self.classes), owner="TorchClassifier", stacklevel=4
        )
        return classes, torch.from_numpy(np.asarray(codes, dtype=np.int64))

    def _device(self) -> torch.device:
        """The device to use, checked before any computation (a missing GPU is an error, not a fallback)."""
        return resolve_device(self.device)

    def _physical_batch(self, device: torch.device) -> int | None:
        if self.max_physical_batch_size == "auto":
            return 256 if device.type == "cpu" else None
        return self.max_physical_batch_size  # type: ignore[return-value]  # the engine validates it

    def _threads(self) -> Any:
        return _ThreadLimit(self.threads)

    def _check_hyperparameters(self) -> None:
        """Settings no fit or prediction could use, refused before either (and when a model file is read).

        The DP-SGD settings are :meth:`_check_fit_settings`' (a fit's alone); these are the ones a model file
        carries into every prediction, so that a bad file fails at load, not at each request.
        """
        if self.model not in IMAGE_ARCHITECTURES:
            raise ValueError(f"model must be one of {', '.join(IMAGE_ARCHITECTURES)}, got {self.model!r}")
        shape = check_image_shape(self.input_shape)
        # The Tramer-Boneh CNN sizes its linear layer from the width alone: other heights fail every prediction.
        if self.model == "tramer-boneh" and shape[1] != shape[2]:
            raise ValueError(f"the tramer-boneh model needs square images, got input_shape {shape}")
        check_threads(self.threads)

    def _check_fit_settings(self) -> None:
        """Every setting of a fit that needs no data, refused before any is read: :meth:`_check_hyperparameters`'
        and DP-SGD's (the accountants' rules, epsilon, delta, the noise, the clip norm, the learning rate, epochs of
        at least one step each, the batch size, the precisions). Run first by :meth:`fit`, and by a caller that
        builds the estimator before it reads the data (the CLI); what needs n is :meth:`_check_plan`'s.
        """
        self._check_hyperparameters()
        epsilon = None if self.epsilon is None else check_epsilon(self.epsilon, allow_inf=True)
        if epsilon is None or not np.isinf(epsilon):  # the baseline (inf) draws no noise: no DP-SGD settings
            check_dpsgd_options(neighbouring=self.neighbouring, sampling=self.sampling, accountant=self.accountant,
                                replace_one_bound=self.replace_one_bound)
            check_positive_delta(self.delta)
            if self.noise_multiplier is not None:
                check_positive(self.noise_multiplier, "noise_multiplier")
            elif epsilon is None:
                raise ValueError("give noise_multiplier, a target epsilon, or both")
            check_positive(self.clip_norm, "clip_norm")
        planned_steps(self._epochs(), q=1.0)  # epochs > 0, each at least one step: within the accountants' cap
        check_positive(self._learning_rate(), "learning_rate")
        check_positive(self.momentum, "momentum", allow_zero=True)
        if self.batch_size is not None:
            check_positive(self.batch_size, "batch_size")
        check_precisions(self.precision, self.clip_precision, None)  # the engine checks them with its mode

    def _check_plan(self, n: int) -> None:
        """The batch and the step count against n (public), as DPSGDClassifier checks them.

        A batch larger than n was silently capped at n (q = 1), a setting the fit ignored; too many steps failed
        inside the accountant (or ran for ever) after the model was built.
        """
        size = self._batch(n)
        planned_steps(self._epochs(), q=size / n)  # the private run's steps, and the baseline's: one cap

    def _batch(self, n: int) -> float:
        """The expected batch: the one given (at most n), or the default capped at n, as DPSGDClassifier's."""
        if self.batch_size is None:
            return float(min(DEFAULT_BATCH_SIZE, n))
        size = float(self.batch_size)  # > 0: _check_fit_settings
        if size > n:
            raise ValueError(f"batch_size={self.batch_size} exceeds the number of records n={n}")
        return float(size)

    def _epochs(self) -> float:
        """The epochs of the run (a subclass may default them by its own rule)."""
        return self.epochs

    # ------------------------------------------------------------ sklearn API
    def fit(self, X: Any, y: Any) -> TorchClassifier:
        """Train a fresh model on (X, y) with DP-SGD; returns ``self``."""
        self._check_fit_settings()
        device = self._device()
        X_t = self._images(X)
        classes, y_t = self._labels(y)
        if X_t.shape[0] != y_t.shape[0]:
            raise ValueError(f"X has {X_t.shape[0]} rows but y has {y_t.shape[0]}")
        n = int(X_t.shape[0])
        self._check_plan(n)  # before any input is computed, the seed set, the model built or any noise drawn
        seed = self.random_state
        with self._threads():
            inputs = self._inputs(X_t, device).to(device)  # once; batches are gathered on the device
            if seed is not None:
                torch.manual_seed(int(seed))
            module, optimizer = self._new_model(len(classes), device)
            y_t = y_t.to(device)
            if self.epsilon is not None and np.isinf(self.epsilon):
                with charged_fit(self, lambda: None):  # refused under an active privml.budget.BudgetAccountant
                    self._fit_nonprivate(module, optimizer, inputs, y_t, n)
            else:
                engine = self._engine(module, optimizer, n, device)
                # The planned steps' guarantee is charged to an active budget before the first step.
                with charged_fit(self, lambda: engine.plan.guarantee):  # epochs are set here: the plan has one
                    self._train(engine, optimizer, inputs, y_t)
                    self.privacy_ = engine.privacy_
                    self.fit_info_ = engine.info()
        module.eval()
        self.module_ = module
        self.classes_ = classes
        self.n_features_in_ = int(np.prod(self.input_shape))
        return self

    def _build(self, n_classes: int) -> torch.nn.Module:
        """The untrained model these settings make (on the current default device), for a fit or a model file."""
        return build_model(
            self.model, in_channels=self.input_shape[0], n_classes=n_classes, image_size=self.input_shape[-1]
        )

    def _learning_rate(self) -> float:
        return self.learning_rate

    def _inputs(self, images: torch.Tensor, device: torch.device) -> torch.Tensor:
        """What the model reads: the images themselves (ScatterClassifier: their features, computed on ``device``)."""
        return images

    def _new_model(self, n_classes: int, device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """A fresh model of the chosen architecture on ``device`` and its SGD optimiser (seed set by the caller)."""
        module = self._build(n_classes).to(device)
        return module, torch.optim.SGD(module.parameters(), lr=self._learning_rate(), momentum=self.momentum)

    def _train(self, engine: DPSGD, optimizer: torch.optim.Optimizer, X: torch.Tensor, y: torch.Tensor) -> None:
        """A fit's run: the release before the steps (if any), then the DP-SGD steps, then their post-processing."""
        self._release_preceding(engine, X, int(X.shape[0]))
        with self._post_processing(engine, optimizer):
            engine.fit(X, y, progress=self.progress)

    def _release_preceding(self, engine: DPSGD, X: torch.Tensor, n: int) -> None:
        """Release :meth:`_preceding_event` into the model before the steps, from the inputs X of the records in
        the run, n public slots (the others are null records: zero-out); nothing here (ScatterClassifier: the
        feature mean). Also the one-run audit's, on the records of its run."""

    def _post_processing(self, engine: DPSGD, optimizer: torch.optim.Optimizer) -> AbstractContextManager[None]:
        """Around the steps: what turns the DP iterates into the released model (nothing here; ScatterClassifier:
        its weight average). Also the one-run audit's, so that the audited model is the released one."""
        return nullcontext()

    def _engine(
        self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, n: int, device: torch.device,
        *, cuda_graph: bool | str | None = None,
    ) -> DPSGD:
        """The DP-SGD engine of a fit on n records (public) with these settings (also the one-run audit's run,
        which replaces ``cuda_graph``: its canaries are added in Python at each step)."""
        return DPSGD(
            module,
            optimizer=optimizer,
            n_samples=n,
            clip_norm=self.clip_norm,
            # fixed-size batches hold a whole number of records; Poisson's expected size need not
            batch_size=int(self._batch(n)) if self.sampling == "fixed-size" else self._batch(n),
            epochs=self._epochs(),
            noise_multiplier=self.noise_multiplier,
            target_epsilon=self.epsilon,
            delta=self.delta,
            accountant=self.accountant,
            neighbouring=self.neighbouring,
            sampling=self.sampling,
            replace_one_bound=self.replace_one_bound,
            mode=self.mode,  # type: ignore[arg-type]
            max_physical_batch_size=self._physical_batch(device),
            secure_noise=self.secure_noise,
            seed=self.random_state,
            precision=self.precision,
            clip_precision=self.clip_precision,
            cuda_graph=self.cuda_graph if cuda_graph is None else cuda_graph,
            preceding=self._preceding_event(n),
        )

    def _preceding_event(self, n: int) -> DpEvent | None:
        """A release from the n records before the DP-SGD steps, composed into the plan (ScatterClassifier's
        feature mean); None here."""
        return None

    def _fit_nonprivate(
        self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, X: torch.Tensor, y: torch.Tensor, n: int
    ) -> None:
        """Shuffled fixed-size mini-batches, no clipping, no noise: the baseline."""
        generator = torch.Generator(device=X.device)
        generator.manual_seed(0 if self.random_state is None else int(self.random_state))
        batch = int(self._batch(n))
        steps = max(1, round(self._epochs() * n / batch))
        module.train()
        for step in range(steps):
            if step % max(1, n // batch) == 0:
                order = torch.randperm(n, generator=generator, device=X.device)
            start = (step % max(1, n // batch)) * batch
            idx = order[start : start + batch]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(module(X[idx]), y[idx]).backward()
            optimizer.step()
        self.privacy_ = PrivacyGuarantee(float("inf"), 0.0, Neighbouring.parse(self.neighbouring), "none")
        self.fit_info_ = {"steps": steps, "epochs": steps * batch / n, "epsilon": float("inf"), "noise_multiplier": 0.0}

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (softmax of the logits), columns in ``classes_`` order."""
        check_fitted(self, "module_")
        device = self._device()
        X_t = self._images(X)
        out = []
        with self._threads(), torch.no_grad():
            module = self.module_.to(device).eval()
            for part in torch.split(self._inputs(X_t, device), 1024):
                out.append(torch.softmax(module(part.to(device)), dim=1).double().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, len(self.classes_)))

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each row."""
        proba = self.predict_proba(X)  # first: it raises NotFittedError before classes_ is read
        return self.classes_[np.argmax(proba, axis=1)]

    # ------------------------------------------------------------ model files (privml.io)
    def _model_arrays(self) -> dict[str, np.ndarray]:
        """State-dict tensors as arrays (``state.<name>``) and the classes: npz, never pickle."""
        arrays = {f"state.{k}": v.detach().cpu().numpy() for k, v in self.module_.state_dict().items()}
        arrays["classes"] = np.asarray(self.classes_)
        return arrays

    def _architecture(self) -> str:
        """The trained model's name in a refusal of a model file's tensors."""
        return self.model

    def _restore_arrays(self, arrays: dict[str, np.ndarray], metadata: dict) -> None:
        self.input_shape = tuple(int(s) for s in self.input_shape)
        self.classes_ = np.asarray(arrays["classes"])
        if self.classes_.ndim != 1 or self.classes_.size < 2:
            raise ValueError(f"classes must list at least two labels, got an array of shape {self.classes_.shape}")
        state = {k[len("state.") :]: v for k, v in arrays.items() if k.startswith("state.")}
        _check_state_shapes(self._build, self._architecture(), self.input_shape, self.classes_.size, state)
        module = self._build(self.classes_.size)
        module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
        module.eval()
        self.module_ = module
        self.privacy_ = PrivacyGuarantee.from_dict(metadata["privacy"])
        self.fit_info_ = {k: v for k, v in metadata.get("fit_info", {}).items() if k in self.released_info}
        self.n_features_in_ = int(np.prod(self.input_shape))


def _check_state_shapes(
    build: Callable[[int], torch.nn.Module], what: str, input_shape: tuple[int, ...], n_classes: int,
    state: dict[str, Any],
) -> None:
    """The stored tensors must be exactly those ``build(n_classes)`` makes, checked before a model is allocated.

    The model is built on torch's meta device (shapes, no memory): metadata claiming a wide image or
    millions of classes would otherwise allocate gigabytes before ``load_state_dict`` refused the shapes.
    """
    with torch.device("meta"):
        skeleton = build(n_classes)
    expected = {name: tuple(t.shape) for name, t in skeleton.state_dict().items()}
    if set(expected) != set(state):
        odd = sorted(set(expected) ^ set(state))[:3]
        raise ValueError(f"the stored tensors are not those of a {what} model (e.g. {', '.join(odd)})")
    for name, shape in expected.items():
        if tuple(state[name].shape) != shape:
            raise ValueError(
                f"tensor {name!r} has shape {tuple(state[name].shape)}, but input_shape {input_shape} "
                f"and {n_classes} classes make it {shape}"
            )


def check_image_shape(shape: Any) -> tuple[int, ...]:
    """``input_shape`` as a tuple, refused unless it is three positive integers (channels, height, width)."""
    if (not isinstance(shape, list | tuple) or len(shape) != 3
            or not all(isinstance(s, int | np.integer) and not isinstance(s, bool) and s > 0 for s in shape)):
        raise ValueError(f"input_shape must be three positive integers (channels, height, width), got {shape!r}")
    return tuple(shape)


def check_threads(threads: Any) -> None:
    """``threads`` must be None or a positive integer."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int | np.integer)
                                or threads < 1):
        raise ValueError(f"threads must be None or a positive integer, got {threads!r}")


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; any other name is parsed and checked to exist.

    Raises
    ------
    ValueError
        for an unknown device name, or a CUDA device this machine does not have.

    Examples
    --------
    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r}, but torch finds no CUDA device here (use 'auto' or 'cpu')")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(f"device={device!r}, but only {torch.cuda.device_count()} CUDA device(s) exist")
    elif resolved.type != "cpu":
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return resolved


class _ThreadLimit:
    """Temporarily set torch's intra-op thread count (shared machines, parallel ensembles)."""

    def __init__(self, threads: int | None) -> None:
        self.threads = threads
        self.saved = torch.get_num_threads()

    def __enter__(self) -> None:
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))

    def __exit__(self, *exc: object) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.saved)
