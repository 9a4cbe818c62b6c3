"""rlstruct.distributed: schemes of remote collection and gradient workers on a local Ray instance.

The Ray tests share one local instance with 2 CPUs; actors ask for
fractions of a CPU. Every valid combination of the scheme options trains
CartPole-v1 on a small budget and must end with better returns than it
started with: PPO where collection is synchronous, IMPALA (V-trace corrects
for the policy lag) where it is asynchronous.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import itertools
import math
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from mp_helpers import SlowGymEnv
from own_agents import GruAgent, NoBootstrapAgent, WindowAgent

from rlstruct import DictTensor, GymEnv, GymVectorEnv, TemporalDictTensor, Trajectories, load_checkpoint
from rlstruct.algos.config import field_docs
from rlstruct.algos.evaluation import Evaluator
from rlstruct.distributed import (
    IMPALA,
    PPO,
    SAC,
    Collection,
    CollectionWorker,
    DistributedError,
    Gradients,
    GradientWorker,
    Learner,
    MinibatchBuffer,
    RemoteWorkerError,
    ReplayStorage,
    Scheme,
    Updates,
    WholeBatchBuffer,
    _pool,
    resources,
)
from rlstruct.distributed.gradients import flat_gradients, set_flat_gradients
from rlstruct.distributed.scheme import _check_env_id
from rlstruct.gym_env import UnknownEnvironment
from rlstruct.learning.actor_critic import ActorCritic
from rlstruct.learning.soft_actor_critic import SquashedGaussianActor

ray = pytest.importorskip("ray")

TESTS = Path(__file__).resolve().parent
AGENT_ARGS = {"obs_dim": 4, "n_actions": 2, "orthogonal": True}
CARTPOLE = {"env": "CartPole-v1"}
PPO_BUFFER = functools.partial(MinibatchBuffer, n_epochs=10, minibatch_size=256)
SAC_ACTOR = {"obs_dim": 3, "action_low": [-2.0], "action_high": [2.0], "hidden": (16, 16)}
SAC_STORAGE = functools.partial(
    ReplayStorage, 10_000, batch_size=64, gradient_steps=0.05, learning_starts=256
)


def make_scheme(
    algo: str = "ppo",
    env_factory: Any = GymEnv,
    env_args: Any = None,
    *,
    collection: dict[str, Any] | None = None,
    gradients: dict[str, Any] | None = None,
    updates: dict[str, Any] | None = None,
    **options: Any,
) -> Scheme:
    """A scheme of 8 x 32-step rollouts whose actors ask for 0.2 CPU each; the dicts are the fields.

    ``algo`` "sac" trains SAC on Pendulum-v1 (unless ``env_args`` says otherwise) from a replay.
    """
    agent: Any = ActorCritic
    agent_args: dict[str, Any] = AGENT_ARGS
    factories: tuple[Any, Any] = (IMPALA, WholeBatchBuffer) if algo == "impala" else (PPO, PPO_BUFFER)
    if algo == "sac":
        agent, agent_args, factories = SquashedGaussianActor, SAC_ACTOR, (SAC, SAC_STORAGE)
        env_args = {"env": "Pendulum-v1", **(env_args or {})}
    return Scheme(
        agent,
        agent_args,
        env_factory,
        env_args or CARTPOLE,
        *factories,
        collection=Collection(**{"n_envs": 8, "n_steps": 32, "worker_cpus": 0.2, **(collection or {})}),
        gradients=Gradients(**{"worker_cpus": 0.2, **(gradients or {})}),
        updates=Updates(**(updates or {})),
        **{"timeout": 60.0, **options},
    )


def train(learner: Learner) -> list[float]:
    """Step ``learner`` to its target; the return of every episode, in order."""
    returns: list[float] = []
    while not learner.done():
        returns.extend(learner.step().episode_returns)
    return returns


def start_local_ray() -> None:
    ray.init(
        address="local",  # a Ray of its own, even where another runs on this machine
        num_cpus=2,
        include_dashboard=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}},  # mp_helpers, for the actors
    )


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    start_local_ray()
    yield
    ray.shutdown()


def wait_for_cpus(expected: float, timeout: float = 30.0) -> float:
    """Ray's free CPUs once they reach ``expected`` (actors released), or what they were at the timeout."""
    deadline = time.monotonic() + timeout
    free = ray.available_resources().get("CPU", 0.0)
    while free < expected - 1e-6 and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the cluster's books, with a deadline
        free = ray.available_resources().get("CPU", 0.0)
    return float(free)


# Options, checked before any worker starts (no Ray needed).


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"n_envs": 0}, ValueError, "Collection: n_envs must be at least 1, got 0"),
        ({"remote_workers": -1}, ValueError, "Collection: remote_workers must be at least 0, got -1"),
        ({"remote_workers": 1.5}, TypeError, "Collection: remote_workers must be an int, got a float"),
        ({"communication": "sync"}, ValueError, "Collection: communication must be one of 'synchronous', "),
        ({"fraction_workers": 0.0}, ValueError, r"Collection: fraction_workers must be in \(0, 1\], got 0.0"),
        ({"fraction_workers": 0.5}, ValueError, "fraction_workers < 1 needs remote collection workers"),
        (
            {"remote_workers": 2, "communication": "asynchronous", "fraction_workers": 0.5},
            ValueError,
            "fraction_workers applies to synchronous collection",
        ),
        ({"worker_cpus": -1}, ValueError, r"Collection: worker_cpus must be in \[0, inf\), got -1"),
        (
            {"communication": "asynchronous"},
            ValueError,
            "needs remote collection workers, got remote_workers=0",
        ),
        ({"queue_size": 2}, ValueError, "Collection: queue_size applies to asynchronous collection"),
        (
            {"remote_workers": 2, "communication": "asynchronous", "queue_size": 0},
            ValueError,
            "Collection: queue_size must be at least 1, got 0",
        ),
    ],
)
def test_bad_collection_options_name_the_field(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Collection(**options)


@pytest.mark.parametrize(
    ("cls", "options", "error", "message"),
    [
        (Gradients, {"communication": "async"}, ValueError, "Gradients: communication must be one of"),
        (
            Gradients,
            {"communication": "asynchronous"},
            ValueError,
            "Gradients: communication='asynchronous' needs remote gradient workers, got remote_workers=0",
        ),
        (Gradients, {"local_steps": 0}, ValueError, "Gradients: local_steps must be at least 1, got 0"),
        (Gradients, {"local_steps": 2.0}, TypeError, "Gradients: local_steps must be an int, got a float"),
        (
            Gradients,
            {"local_steps": 4, "remote_workers": 2, "communication": "asynchronous"},
            ValueError,
            "local_steps > 1 needs communication='synchronous' .*with communication='asynchronous'",
        ),
        (Gradients, {"worker_gpus": "1"}, TypeError, "Gradients: worker_gpus must be a number, got a str"),
        (Updates, {"execution": "central"}, ValueError, "Updates: execution must be one of 'centralised'"),
        (
            Updates,
            {"broadcast_interval": 0},
            ValueError,
            "Updates: broadcast_interval must be at least 1, got 0",
        ),
    ],
)
def test_bad_gradient_and_update_options_name_the_field(
    cls: type, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        cls(**options)


def test_options_are_frozen() -> None:
    collection = Collection(remote_workers=2)
    with pytest.raises(AttributeError):
        collection.remote_workers = 0  # type: ignore[misc]
    assert Collection(remote_workers=3, communication="asynchronous").queue_limit == 3
    assert Collection(remote_workers=3, communication="asynchronous", queue_size=1).queue_limit == 1
    assert Collection().queue_limit == 1


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"updates": {"execution": "decentralised"}}, ValueError, "needs gradients.remote_workers >= 1"),
        (
            {
                "updates": {"execution": "decentralised"},
                "gradients": {"remote_workers": 2, "communication": "asynchronous"},
            },
            ValueError,
            "updates.execution='decentralised' needs gradients.communication='synchronous'",
        ),
        ({"compression": "gzip"}, ValueError, "compression"),
        ({"timeout": 0}, ValueError, r"Scheme: timeout must be in \(0, 1e\+06\], got 0"),
        ({"timeout": math.inf}, ValueError, r"timeout must be in \(0, 1e\+06\]"),
        ({"seed": -1}, ValueError, "Scheme: seed must be at least 0, got -1"),
        ({"on_worker_failure": "ignore"}, ValueError, "on_worker_failure must be one of 'raise', 'continue'"),
        (
            {"gradients": {"local_steps": 4, "remote_workers": 2}, "updates": {"execution": "decentralised"}},
            ValueError,
            "gradients.local_steps > 1 needs updates.execution='centralised' .*got gradients.local_steps=4 "
            "with updates.execution='decentralised'",
        ),
        (
            {
                "gradients": {"local_steps": 4},
                "collection": {"remote_workers": 2, "communication": "asynchronous"},
            },
            ValueError,
            "gradients.local_steps > 1 needs collection.communication='synchronous' "
            ".*with collection.communication='asynchronous'",
        ),
        (
            {
                "device": "cuda",
                "gradients": {"remote_workers": 2, "worker_gpus": 0.5},
                "updates": {"execution": "decentralised"},
            },
            ValueError,
            "need a whole GPU per gradient worker, got gradients.worker_gpus=0.5",
        ),
        (
            {"device": "cuda", "gradients": {"remote_workers": 1}},
            ValueError,
            "device='cuda' on remote gradient workers needs gradients.worker_gpus > 0",
        ),
    ],
)
def test_bad_scheme_options_name_the_option(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make_scheme(**options)


def test_options_must_be_their_dataclasses() -> None:
    with pytest.raises(TypeError, match="Scheme: collection must be a Collection, got a dict"):
        Scheme(ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, PPO, PPO_BUFFER, collection={"n_envs": 2})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("agent", "agent_args", "env_args", "factories", "text"),
    [
        (
            ActorCritic,
            AGENT_ARGS,
            CARTPOLE,
            (PPO, SAC_STORAGE),
            "a ReplayStorage, but PPO prepares data for MinibatchBuffer or WholeBatchBuffer",
        ),
        (ActorCritic, AGENT_ARGS, CARTPOLE, (IMPALA, SAC_STORAGE), "a ReplayStorage, but IMPALA prepares"),
        (
            SquashedGaussianActor,
            SAC_ACTOR,
            {"env": "Pendulum-v1"},
            (SAC, WholeBatchBuffer),
            "a WholeBatchBuffer, but SAC prepares data for ReplayStorage, PrioritizedStorage or HindsightStorage",
        ),
        (
            SquashedGaussianActor,
            SAC_ACTOR,
            {"env": "Pendulum-v1"},
            (SAC, PPO_BUFFER),
            "a MinibatchBuffer, but SAC",
        ),
    ],
)
def test_a_buffer_for_the_other_kind_of_algorithm_is_refused_before_any_worker_starts(
    agent: Any, agent_args: dict[str, Any], env_args: dict[str, Any], factories: tuple[Any, Any], text: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(f"Scheme: buffer_factory makes {text}")):
        Scheme(agent, agent_args, GymEnv, env_args, *factories, collection=Collection(n_envs=2, n_steps=4))


@pytest.mark.parametrize(
    ("device", "error", "message"),
    [
        ("gpu", ValueError, r"Scheme: device must name a torch device such as 'cpu' or 'cuda:0', got 'gpu'"),
        ("cuda:x", ValueError, r"device must name a torch device such as 'cpu' or 'cuda:0', got 'cuda:x'"),
        ("meta", ValueError, r"Scheme: device must be 'cpu', 'cuda' or 'cuda:<index>', got 'meta'"),
        (0.5, TypeError, "Scheme: device must be a str, a torch.device or an int, got a float"),
    ],
)
def test_bad_device_is_refused_before_any_worker_starts(
    device: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make_scheme(
            device=device, gradients={"remote_workers": 2}
        )  # no Ray started: the device is checked first


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"device='cuda' needs CUDA in this process.*is False; use device='cpu'"
    ):
        make_scheme(device="cuda")


@pytest.mark.parametrize("env_factory", [GymEnv, GymVectorEnv])
def test_an_unknown_environment_id_is_refused_when_the_scheme_is_built(env_factory: Any) -> None:
    """Before, the id failed at the first step(), in the environments a worker (a Ray actor) makes."""
    for collection in ({}, {"remote_workers": 2}):  # remote workers: refused before Ray starts
        with pytest.raises(
            UnknownEnvironment,
            match=re.escape(
                "Scheme: env_args['env']: unknown environment 'CartPol-v1' (NameNotFound: Environment "
                "`CartPol` doesn't exist. Did you mean: `CartPole`?); did you mean 'CartPole-v1'?"
            ),
        ):
            make_scheme(env_factory=env_factory, env_args={"env": "CartPol-v1"}, collection=collection)
    assert not ray.is_initialized()


def test_an_id_whose_module_only_the_workers_may_have_is_left_to_them() -> None:
    """A module missing here (a Ray runtime_env may give it to remote workers) is left to the workers to import."""
    _check_env_id(GymEnv, {"env": "no_such_module_x:Foo-v0"})
    with pytest.raises(
        UnknownEnvironment,
        match=re.escape("Scheme: env_args['env']: unknown environment 'gymnasium:CartPol-v1'"),
    ):
        _check_env_id(GymEnv, {"env": "gymnasium:CartPol-v1"})  # a module found here: its id is checked


def test_factories_must_be_callable() -> None:
    with pytest.raises(TypeError, match="Scheme: algo_factory must be callable, got an int"):
        Scheme(ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, 3, WholeBatchBuffer)  # type: ignore[arg-type]


def test_factories_that_make_no_algorithm_or_buffer_are_named_before_any_worker_starts() -> None:
    """Before, an algo_factory or buffer_factory that made something else (None) failed later inside
    the scheme: AttributeError 'NoneType' object has no attribute 'model', or 'insert' at the first step
    (a remote gradient worker's as a RemoteWorkerError)."""
    with pytest.raises(
        TypeError,
        match=re.escape(
            "Scheme: algo_factory must make an Algorithm (model, optimizer, max_grad_norm, prepare, loss, "
            "set_parameter), got a NoneType"
        ),
    ):
        Scheme(ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, lambda model: None, PPO_BUFFER)

    class NoSetParameter:  # a user's algorithm with all but one member
        def __init__(self, model: torch.nn.Module) -> None:
            self.model, self.max_grad_norm = model, None
            self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def prepare(self, batch: Any) -> Any:
            return batch

        def loss(self, minibatch: Any) -> Any:
            raise NotImplementedError

    with pytest.raises(TypeError, match=re.escape("got a NoSetParameter without set_parameter")):
        Scheme(ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, NoSetParameter, PPO_BUFFER)
    for gradients in (
        Gradients(),
        Gradients(remote_workers=1),
    ):  # no Ray started: the buffer is checked first
        with pytest.raises(
            TypeError,
            match=re.escape("Scheme: buffer_factory must make a Buffer (insert, minibatches), got a list"),
        ):
            Scheme(ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, PPO, list, gradients=gradients)
    assert not ray.is_initialized()
    with pytest.raises(
        TypeError,
        match=re.escape(
            "GradientWorker: buffer_factory must make a Buffer (insert, minibatches), got a NoneType"
        ),
    ):
        GradientWorker(0, ActorCritic, AGENT_ARGS, PPO, lambda: None, lambda: None)


@pytest.mark.parametrize("name", ["agent_args", "env_args"])
def test_arguments_that_are_not_a_dict_are_named(name: str) -> None:
    args: list[Any] = [ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, PPO, PPO_BUFFER]
    args[1 if name == "agent_args" else 3] = None
    with pytest.raises(
        TypeError, match=f"Scheme: {name} must be a dict of keyword arguments .str keys., got a NoneType"
    ):
        Scheme(*args)


def test_a_closed_scheme_says_so_and_a_learner_refuses_it() -> None:
    scheme = make_scheme()
    weights = scheme.weights()
    scheme.close()
    with pytest.raises(RuntimeError, match=r"Scheme\.set_parameter: the scheme is closed"):
        scheme.set_parameter("lr", 0.1)  # was taken without a word
    assert scheme.closed and scheme.weights().keys() == weights.keys()  # in process: still readable
    with pytest.raises(ValueError, match="Learner: scheme is closed; make a new one"):
        Learner(scheme, target_steps=100, progress=False)


def test_resources_never_schedulable_are_refused() -> None:
    one_cpu_nodes = [{"CPU": 1.0}, {"CPU": 1.0}]
    gpu = resources.Request("gradient", 1, 0.5, 1.0, "gradients.worker")
    with pytest.raises(
        DistributedError, match=r"asks for 1 GPU \(gradients.worker_gpus\).*has 0.*gradients.worker_gpus=0"
    ):
        resources.check([gpu], one_cpu_nodes)
    big = resources.Request("collection", 1, 1.5, 0.0, "collection.worker")
    with pytest.raises(
        DistributedError, match=r"1.5 CPU \(collection.worker_cpus\), but the largest node .* has 1"
    ):
        resources.check([big], one_cpu_nodes)
    many = resources.Request("collection", 3, 1.0, 0.0, "collection.worker")
    with pytest.raises(DistributedError, match=r"ask for 3 CPU in all \(3 x 1 for collection\).*has 2"):
        resources.check([many], one_cpu_nodes)
    resources.check(
        [resources.Request("collection", 4, 0.5, 0.0, "collection.worker")], one_cpu_nodes
    )  # fits


def test_oversubscription_advice_names_options_and_values_that_fit() -> None:
    two_cpus = [{"CPU": 2.0, "GPU": 2.0}]
    no_collection = resources.Request("collection", 0, 1.0, 0.0, "collection.worker")

    def advice(requests: list[resources.Request]) -> str:
        with pytest.raises(DistributedError) as caught:
            resources.check(requests, two_cpus)
        return str(caught.value)

    # Three gradient workers alone: 2 CPUs / 3 actors = 0.666..., rounded down to 0.66.
    grad = resources.Request("gradient", 3, 1.0, 0.0, "gradients.worker")
    message = advice([no_collection, grad])
    assert "(3 x 1 for gradient)" in message and "(gradients.worker_cpus=0.66)" in message
    assert "collection.worker" not in message  # there are no collection workers to shrink
    resources.check(
        [no_collection, resources.Request("gradient", 3, 0.66, 0.0, "gradients.worker")], two_cpus
    )
    # collection.worker_cpus=0.5 already: 4 x 0.5 + 2 x 1 = 4 CPUs; 2 / 6 actors = 0.33 each.
    col = resources.Request("collection", 4, 0.5, 0.0, "collection.worker")
    grad = resources.Request("gradient", 2, 1.0, 0.0, "gradients.worker")
    assert "(collection.worker_cpus=0.33, gradients.worker_cpus=0.33)" in advice([col, grad])
    # A role already under the share keeps its request: 4 x 0.5 + 2 x 0.2 = 2.4.
    light = resources.Request("gradient", 2, 0.2, 0.0, "gradients.worker")
    assert "(collection.worker_cpus=0.33)" in advice([col, light])
    resources.check([resources.Request("collection", 4, 0.33, 0.0, "collection.worker"), light], two_cpus)
    # GPUs: the advice names the GPU option, with the GPUs' share.
    gpus = resources.Request("gradient", 3, 0.1, 1.0, "gradients.worker")
    message = advice([no_collection, gpus])
    assert (
        "ask for 3 GPU in all (3 x 1 for gradient)" in message and "(gradients.worker_gpus=0.66)" in message
    )
    assert "cpus=" not in message


# Algorithms, buffers and gradients.


def test_set_parameter_checks_name_and_type() -> None:
    algorithm = PPO(ActorCritic(**AGENT_ARGS))
    algorithm.set_parameter("lr", 1e-4)
    assert algorithm.optimizer.param_groups[0]["lr"] == 1e-4
    with pytest.raises(ValueError, match=r"PPO.set_parameter: name must be one of lr, gamma.*got 'epsilon'"):
        algorithm.set_parameter("epsilon", 0.1)
    with pytest.raises(TypeError, match=r"PPO\.set_parameter: clip must be a float, got a str"):
        algorithm.set_parameter("clip", "0.1")  # type: ignore[arg-type]
    impala = IMPALA(ActorCritic(**AGENT_ARGS))
    with pytest.raises(TypeError, match="normalize_advantages must be a bool, got a float"):
        impala.set_parameter("normalize_advantages", 1.0)
    impala.set_parameter("normalize_advantages", False)
    assert impala.normalize_advantages is False


@pytest.mark.parametrize("value", [-1e-4, math.nan, math.inf])
@pytest.mark.parametrize("algo", [PPO, IMPALA])
def test_set_parameter_refuses_what_the_constructor_refuses(algo: Any, value: float) -> None:
    name = algo.__name__
    with pytest.raises(ValueError, match=rf"{name}: lr must be finite and at least 0, got {value!r}"):
        algo(ActorCritic(**AGENT_ARGS), lr=value)
    algorithm = algo(ActorCritic(**AGENT_ARGS), lr=1e-3)
    with pytest.raises(
        ValueError, match=rf"{name}\.set_parameter: lr must be finite and at least 0, got {value!r}"
    ):
        algorithm.set_parameter("lr", value)
    assert algorithm.lr == 1e-3 and algorithm.optimizer.param_groups[0]["lr"] == 1e-3  # unchanged
    with pytest.raises(ValueError, match=r"set_parameter: gamma must be in \[0, 1\], got 1.5"):
        algorithm.set_parameter("gamma", 1.5)
    algorithm.set_parameter("lr", 0.0)  # stopping is allowed


@pytest.mark.parametrize("algo", [PPO, IMPALA])
def test_set_parameter_takes_the_numpy_numbers_the_constructor_takes(algo: Any) -> None:
    """Before, set_parameter refused a NumPy float32 or int ("lr must be a float, got a float32")
    that the constructor took, so an annealed learning rate computed in NumPy failed mid-run."""
    algo(ActorCritic(**AGENT_ARGS), lr=np.float32(1e-3))  # the constructor takes it
    algorithm = algo(ActorCritic(**AGENT_ARGS))
    algorithm.set_parameter("lr", np.float32(0.25))
    assert algorithm.lr == 0.25 and type(algorithm.lr) is float
    assert algorithm.optimizer.param_groups[0]["lr"] == 0.25
    algorithm.set_parameter("gamma", np.int64(1))
    assert algorithm.gamma == 1.0 and type(algorithm.gamma) is float
    with pytest.raises(
        ValueError, match=rf"{algo.__name__}\.set_parameter: lr must be finite and at least 0"
    ):
        algorithm.set_parameter("lr", np.float32(-1.0))
    with pytest.raises(TypeError, match=r"set_parameter: lr must be a float, got a bool"):
        algorithm.set_parameter("lr", True)


@pytest.mark.parametrize(
    ("algo", "options", "text"),
    [
        (PPO, {"lr": True}, "PPO: lr must be a float, got a bool"),
        (PPO, {"clip": "0.2"}, "PPO: clip must be a float, got a str"),
        (IMPALA, {"gamma": False}, "IMPALA: gamma must be a float, got a bool"),
        (IMPALA, {"normalize_advantages": "no"}, "IMPALA: normalize_advantages must be a bool, got a str"),
        (
            IMPALA,
            {"normalize_advantages": np.float64(1.0)},
            "normalize_advantages must be a bool, got a float64",
        ),
    ],
)
def test_the_constructors_refuse_what_set_parameter_refuses(
    algo: Any, options: dict[str, Any], text: str
) -> None:
    """Before, the constructors took a bool or a str for a number (lr=True trained at 1.0, clip="0.2"
    at 0.2) and anything for a flag (normalize_advantages="no" normalised), which set_parameter refuses."""
    with pytest.raises(TypeError, match=re.escape(text)):
        algo(ActorCritic(**AGENT_ARGS), **options)
    assert (
        algo(ActorCritic(**AGENT_ARGS), lr=np.float32(0.5), gamma=1).gamma == 1.0
    )  # NumPy and ints are numbers


def test_learner_refuses_a_negative_learning_rate_before_the_workers_see_it() -> None:
    with Learner(make_scheme(), target_steps=256, progress=False) as learner:
        with pytest.raises(
            ValueError, match=r"PPO\.set_parameter: lr must be finite and at least 0, got -1e-05"
        ):
            learner.update_algorithm_parameter("lr", -1e-5)
        local = learner.scheme.local
        assert local is not None and local.algorithm.optimizer.param_groups[0]["lr"] == 1e-3


def test_learner_checks_progress_and_stream() -> None:
    """Before, a stream without write failed at the first step (AttributeError: 'str' object has no
    attribute 'write'), and progress="no" showed the progress line."""
    with make_scheme() as scheme:
        with pytest.raises(
            TypeError, match=r"Learner: stream must be None or a text stream \(with write\), got a str"
        ):
            Learner(scheme, target_steps=256, stream="log.txt")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"Learner: progress must be a bool, got a str"):
            Learner(scheme, target_steps=256, progress="no")  # type: ignore[arg-type]
        stream = io.StringIO()
        Learner(scheme, target_steps=256, stream=stream).step()
        assert "step 256/256" in stream.getvalue()


def test_step_after_done_raises_and_done_stays_true() -> None:
    # One batch of 8 x 32 = 256 steps, 10 passes of one minibatch: done after 10 steps.
    with Learner(make_scheme(), target_steps=256, progress=False) as learner:
        train(learner)
        assert learner.updates == 10
        with pytest.raises(
            RuntimeError, match=r"Learner\.step: the learner is done \(256 env steps of target_steps=256"
        ):
            learner.step()
        assert learner.done() and learner.updates == 10 and learner.scheme.version == 10


def _global_rng_states() -> tuple[torch.Tensor, object, tuple[bytes, int]]:
    """The states of torch's global CPU generator, of ``random`` and of NumPy's global generator."""
    _, key, position, *_ = np.random.get_state()
    return torch.get_rng_state(), random.getstate(), (key.tobytes(), position)


def _assert_same_rng_states(before: tuple[Any, ...], after: tuple[Any, ...]) -> None:
    assert torch.equal(before[0], after[0]), "torch's global generator was reseeded or drawn from"
    assert before[1] == after[1], "random's generator changed"
    assert before[2] == after[2], "NumPy's global generator changed"


def test_making_and_stepping_a_scheme_leaves_the_global_generators_alone() -> None:
    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
    before = _global_rng_states()
    with make_scheme(seed=7) as scheme:
        _assert_same_rng_states(before, _global_rng_states())
        scheme.step()
        scheme.step()
        _assert_same_rng_states(before, _global_rng_states())


def test_a_seed_gives_the_same_run_whatever_the_caller_drew_before() -> None:
    runs = []
    for caller_seed in (1, 2):
        torch.manual_seed(caller_seed)
        with make_scheme(seed=3) as scheme:
            first = scheme.weights()
            for _ in range(3):
                scheme.step()
            runs.append((first, scheme.weights()))
    (first, last), (other_first, other_last) = runs
    assert all(torch.equal(first[k], other_first[k]) and torch.equal(last[k], other_last[k]) for k in first)
    # The model starts as torch's generator seeded with the scheme's seed makes it, as before.
    torch.manual_seed(3)
    expected = ActorCritic(**AGENT_ARGS).state_dict()
    assert all(torch.equal(first[k], expected[k]) for k in expected)


def test_numpy_ints_are_ints_for_the_seed_and_the_target() -> None:
    """Before, a NumPy seed passed the check and failed in torch ('an integer is required'),
    and a NumPy target_steps was refused as not an int."""
    with make_scheme(seed=3) as scheme:
        scheme.step()
        expected = scheme.weights()
    with Learner(make_scheme(seed=np.int64(3)), target_steps=np.int64(256), progress=False) as learner:
        learner.step()
        assert learner.target_steps == 256 and type(learner.target_steps) is int
        weights = learner.scheme.weights()
    assert all(torch.equal(weights[k], expected[k]) for k in expected)


def test_a_seed_beyond_torchs_seeds_is_refused_by_name() -> None:
    """Before, a seed of 2**64 or more passed the check and failed in torch ("Overflow when unpacking
    long long"), and MinibatchBuffer's seed was not checked at all (a str or a bool reached torch)."""
    make_scheme(seed=2**64 - 1).close()  # torch's largest seed
    with pytest.raises(ValueError, match=r"Scheme: seed must be in \[0, 2\*\*64\), got 18446744073709551616"):
        make_scheme(seed=2**64)
    MinibatchBuffer(seed=-(2**63))
    MinibatchBuffer(seed=np.int64(5))  # refused by torch before ("an integer is required")
    with pytest.raises(
        ValueError, match=r"MinibatchBuffer: seed must be in \[-2\*\*63, 2\*\*64\), got 20{20}"
    ):
        MinibatchBuffer(seed=2 * 10**20)
    with pytest.raises(TypeError, match=r"MinibatchBuffer: seed must be an int, got a str"):
        MinibatchBuffer(seed="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"MinibatchBuffer: seed must be an int, got a bool"):
        MinibatchBuffer(seed=True)
    with pytest.raises(ValueError, match=r"MinibatchBuffer: seed must be at least -9223372036854775808"):
        MinibatchBuffer(seed=-(2**63) - 1)
    with pytest.raises(
        ValueError, match=r"ReplayStorage: seed must be in \[0, 2\*\*64\), got 18446744073709551616"
    ):
        ReplayStorage(10, seed=2**64)


def test_weights_are_copies_of_the_live_model() -> None:
    with make_scheme() as scheme:
        weights = scheme.weights()
        kept = {k: v.clone() for k, v in weights.items()}
        scheme.step()  # an optimiser step on the live model: the copy does not move
        assert all(torch.equal(weights[k], kept[k]) for k in kept)
        for v in weights.values():
            v.fill_(7.0)  # and writing to the copy leaves the model alone
        assert not any(torch.equal(v, torch.full_like(v, 7.0)) for v in scheme.model.state_dict().values())


def test_minibatch_buffer_covers_every_step_once_per_epoch() -> None:
    buffer = MinibatchBuffer(n_epochs=3, minibatch_size=4)
    buffer.insert(DictTensor({"i": torch.arange(10)}))
    batches = list(buffer.minibatches())
    assert [b.n_elems() for b in batches] == [4, 4, 2] * 3 and len(buffer) == 9
    for epoch in range(3):
        seen = torch.cat([b["i"] for b in batches[3 * epoch : 3 * epoch + 3]])
        assert sorted(seen.tolist()) == list(range(10))
    with pytest.raises(ValueError, match="minibatch_size must be a positive int, got 0"):
        MinibatchBuffer(minibatch_size=0)


def test_the_buffers_take_numpy_ints() -> None:
    """Before, MinibatchBuffer and WholeBatchBuffer refused NumPy ints as not positive ints."""
    buffer = MinibatchBuffer(n_epochs=np.int64(2), minibatch_size=np.int32(4))
    assert (buffer.n_epochs, buffer.minibatch_size) == (2, 4) and type(buffer.minibatch_size) is int
    buffer.insert(DictTensor({"i": torch.arange(6)}))
    assert [b.n_elems() for b in buffer.minibatches()] == [4, 2] * 2
    whole = WholeBatchBuffer(np.int64(3))
    assert whole.n_passes == 3 and type(whole.n_passes) is int
    with pytest.raises(ValueError, match=r"MinibatchBuffer: n_epochs must be a positive int, got True"):
        MinibatchBuffer(n_epochs=True)
    # NumPy 2 writes the value as np.int64(0), NumPy 1 (numpy>=1.24 is allowed) as 0
    with pytest.raises(
        ValueError, match=r"WholeBatchBuffer: n_passes must be a positive int, got (np\.int64\(0\)|0$)"
    ):
        WholeBatchBuffer(np.int64(0))


def test_flat_gradients_round_trip() -> None:
    model = ActorCritic(**AGENT_ARGS)
    model.value_of(torch.randn(5, 4)).sum().backward()
    flat = flat_gradients(model)
    assert flat.shape == (sum(p.numel() for p in model.parameters()),) and flat.dtype == torch.float32
    copy = ActorCritic(**AGENT_ARGS)
    set_flat_gradients(copy, flat)
    for p, q in zip(model.parameters(), copy.parameters(), strict=True):
        expected = p.grad if p.grad is not None else torch.zeros_like(p)
        assert q.grad is not None and torch.equal(q.grad, expected)
    with pytest.raises(ValueError, match=r"flat must have shape \[\d+\], got \[3\]"):
        set_flat_gradients(copy, torch.zeros(3))
    with pytest.raises(ValueError, match=r"flat must have dtype torch\.float32, got torch\.float64"):
        set_flat_gradients(copy, flat.double())
    double = torch.nn.Linear(4, 2).double()
    double(torch.randn(5, 4, dtype=torch.float64)).sum().backward()
    assert flat_gradients(double).dtype == torch.float64  # never cast behind the user's back
    mixed = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).double())
    with pytest.raises(ValueError, match="parameters must share one dtype"):
        flat_gradients(mixed)


def test_in_process_scheme_needs_no_ray_and_learns() -> None:
    assert not ray.is_initialized()
    with Learner(make_scheme(), target_steps=12_000, progress=False) as learner:
        returns = train(learner)
        metrics = learner.metrics()
    assert not ray.is_initialized()
    assert (
        12_000 <= metrics["env_steps"] < 12_000 + 256
        and metrics["policy_lag"] == 0.0
        and metrics["sent_bytes"] == 0
        and metrics["rollout_bytes"] == metrics["rollout_raw_bytes"] == 0
    )
    assert _mean(returns[-10:]) > 1.5 * _mean(returns[:10]), returns


def _local_steps_run(k: int, **options: Any) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Weights after two batches of 8 x 32 steps (10 minibatches each), and each step's updates."""
    gradients = {**options.pop("gradients", {}), "local_steps": k}
    with Learner(make_scheme(gradients=gradients, **options), target_steps=512, progress=False) as learner:
        updates = []
        while not learner.done():
            updates.append(learner.step().updates)
        assert learner.updates == sum(updates) == learner.scheme.version == 20
        return learner.scheme.weights(), updates


def test_local_steps_equal_single_steps_in_process() -> None:
    single, updates = _local_steps_run(1)
    assert updates == [1] * 20
    # A round stops after its batch's last minibatch: 10 = 4 + 4 + 2.
    for k, expected in ((4, [4, 4, 2] * 2), (10, [10, 10]), (1000, [10, 10])):
        weights, updates = _local_steps_run(k)
        assert updates == expected, k
        # One gradient worker: the same gradients, clipping and Adam steps, bit for bit.
        assert all(torch.equal(weights[name], single[name]) for name in single), k


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# Every combination on Ray.

EXECUTIONS = ("centralised", "decentralised")
COMBINATIONS = [
    {
        "collection": {"remote_workers": col, "communication": col_comm},
        "gradients": {"remote_workers": grad, "communication": grad_comm},
        "updates": {"execution": update},
    }
    for col, col_comm, grad, grad_comm, update in itertools.product(
        (0, 2), ("synchronous", "asynchronous"), (0, 2), ("synchronous", "asynchronous"), EXECUTIONS
    )
    if not (col == 0 and col_comm == "asynchronous")
    and not (grad == 0 and (grad_comm == "asynchronous" or update == "decentralised"))
    and not (update == "decentralised" and grad_comm == "asynchronous")
    and (col, grad) != (0, 0)
]


def _name(options: dict[str, Any]) -> str:
    collection, gradients, updates = options["collection"], options["gradients"], options["updates"]
    return (
        f"col{collection['remote_workers']}-{collection['communication'][:5]}-"
        f"grad{gradients['remote_workers']}-{gradients['communication'][:5]}-{updates['execution'][:7]}"
    )


def test_every_combination_is_listed() -> None:
    assert len(COMBINATIONS) == 11


@pytest.mark.slow
@pytest.mark.parametrize("options", COMBINATIONS, ids=_name)
def test_every_combination_learns(local_ray: None, options: dict[str, Any]) -> None:
    asynchronous = options["collection"]["communication"] == "asynchronous"
    gradients, execution = options["gradients"], options["updates"]["execution"]
    scheme = make_scheme("impala" if asynchronous else "ppo", **options)
    with Learner(scheme, target_steps=20_000 if asynchronous else 10_000, progress=False) as learner:
        returns = train(learner)
        metrics = learner.metrics()
    assert _mean(returns[-10:]) > 1.5 * _mean(returns[:10]), returns
    assert metrics["lost_workers"] == []
    if gradients["remote_workers"]:
        assert metrics["sent_bytes"] > 0 or execution == "decentralised"
    if execution == "centralised" and gradients["communication"] == "asynchronous":
        assert metrics["gradient_asynchrony"] > 0  # the other worker's update came in between
    elif execution == "centralised":
        assert metrics["gradient_asynchrony"] == 0
    if not asynchronous:
        assert metrics["policy_lag"] == 0
    assert wait_for_cpus(2.0) == pytest.approx(2.0)  # every actor released


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_synchronous_central_scheme_solves_past_195(local_ray: None) -> None:
    # in process, the same scheme ends at 500.0, 169.6 and 500.0 on seeds 0, 1 and 2: this checks one run that learns
    scheme = make_scheme(gradients={"remote_workers": 1}, collection={"remote_workers": 1}, seed=0)
    with Learner(scheme, target_steps=40_000, progress=False) as learner:
        train(learner)
        weights = learner.scheme.weights()
    with Evaluator(
        ActorCritic, AGENT_ARGS, "CartPole-v1", n_episodes=10, max_steps=500, seed=10**6
    ) as evaluator:
        result = evaluator.evaluate(weights, 40_000)
    assert result.mean > 195, result


@pytest.mark.slow
def test_preempted_synchronous_collection_loses_nothing(local_ray: None) -> None:
    # With half of 2 workers enough, each collection returns the first rollout in; the other is
    # taken by the next one, so every collected step is trained on and lags at most one batch.
    scheme = make_scheme(collection={"remote_workers": 2, "fraction_workers": 0.5})
    with Learner(scheme, target_steps=4096, progress=False) as learner:
        infos = [learner.step() for _ in range(60)]
    collected = [info.env_steps for info in infos if info.env_steps]
    assert collected and all(steps % 256 == 0 for steps in collected)
    assert sum(collected) == learner.env_steps
    assert max(lag for info in infos for lag in info.policy_lag) <= 10 * 2  # one batch of 10 passes


@pytest.mark.slow
def test_a_remote_collection_worker_runs_a_multiprocess_batcher(local_ray: None) -> None:
    scheme = make_scheme(collection={"remote_workers": 1, "processes": 2, "n_envs": 4})
    with Learner(scheme, target_steps=512, progress=False) as learner:
        infos = [learner.step() for _ in range(20)]  # two batches of 2 processes x 4 envs x 32 steps
    assert [info.env_steps for info in infos if info.env_steps] == [256, 256]
    assert all(lag == 0 for info in infos for lag in info.policy_lag)


@pytest.mark.slow
def test_broadcast_interval_spaces_the_collectors_weights(local_ray: None) -> None:
    scheme = make_scheme(collection={"remote_workers": 1}, updates={"broadcast_interval": 4})
    with Learner(scheme, target_steps=2048, progress=False) as learner:
        lags = [lag for _ in range(40) for lag in learner.step().policy_lag]
    assert max(lags) > 0 and all(lag < 4 for lag in lags)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "sac"])
@pytest.mark.parametrize("role", ["collection", "gradient"])
def test_killed_worker_raises_by_default(local_ray: None, role: str, algo: str) -> None:
    scheme = make_scheme(algo, collection={"remote_workers": 2}, gradients={"remote_workers": 2})
    with Learner(scheme, target_steps=10**6, progress=False) as learner:
        learner.step()
        # Collection worker 2 is the first of gradient worker 1's: indices count across the scheme.
        ray.kill(scheme.collection_actors[1][0] if role == "collection" else scheme.gradient_actors[1])
        index = 2 if role == "collection" else 1
        with pytest.raises(RemoteWorkerError, match=rf"{role} worker {index}: .*died") as caught:
            for _ in range(200):
                learner.step()
    assert (caught.value.role, caught.value.index, caught.value.died) == (role, index, True)
    assert wait_for_cpus(2.0) == pytest.approx(2.0)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "sac"])
@pytest.mark.parametrize("role", ["collection", "gradient"])
def test_killed_worker_is_dropped_when_told_to_continue(local_ray: None, role: str, algo: str) -> None:
    scheme = make_scheme(
        algo, collection={"remote_workers": 2}, gradients={"remote_workers": 2}, on_worker_failure="continue"
    )
    with Learner(scheme, target_steps=10**6, progress=False) as learner:
        learner.step()
        if role == "collection":
            ray.kill(scheme.collection_actors[1][1])
            expected = [("collection", 3)]
        else:  # its two collection workers are stopped and counted with it
            ray.kill(scheme.gradient_actors[1])
            expected = [("collection", 2), ("collection", 3), ("gradient", 1)]
        before = learner.env_steps
        for _ in range(60):
            learner.step()
        assert sorted(learner.metrics()["lost_workers"]) == expected
        assert learner.env_steps > before  # the others go on collecting and learning
    assert wait_for_cpus(2.0) == pytest.approx(2.0)


@pytest.mark.slow
def test_a_crashing_batcher_process_is_reported_with_its_collection_worker(local_ray: None) -> None:
    scheme = make_scheme(
        env_factory=SlowGymEnv,
        env_args={"env": "CartPole-v1", "fail_after": 40},
        collection={"remote_workers": 2, "processes": 1},
    )
    with (
        Learner(scheme, target_steps=10**6, progress=False) as learner,
        pytest.raises(
            RemoteWorkerError, match=r"collection worker [01]: raised:(.|\n)*crashed on request"
        ) as caught,
    ):
        train(learner)
    assert caught.value.role == "collection" and not caught.value.died
    assert wait_for_cpus(2.0) == pytest.approx(2.0)


@pytest.mark.slow
def test_asynchronous_collection_uses_every_worker_with_a_short_queue(local_ray: None) -> None:
    from rlstruct.distributed import CollectionWorker, Collectors
    from rlstruct.distributed._pool import Pool

    remote = ray.remote(CollectionWorker).options(num_cpus=0.2)
    small = Collection(n_envs=2, n_steps=8)
    actors = [
        remote.remote(i, ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, small, compression="none")
        for i in range(2)
    ]
    queue = Collection(remote_workers=2, communication="asynchronous", queue_size=1)
    collectors = Collectors(None, Pool("collection", actors, "raise", 60.0), queue)
    collectors.set_weights(ActorCritic(**AGENT_ARGS).state_dict(), 0)
    workers = [collectors.collect()[0].worker for _ in range(6)]
    for actor in actors:
        ray.kill(actor)
    assert sorted(set(workers)) == [0, 1], workers


@pytest.mark.slow
def test_decentralised_scheme_stops_cleanly_on_a_lost_worker(local_ray: None) -> None:
    scheme = make_scheme(
        gradients={"remote_workers": 2},
        updates={"execution": "decentralised"},
        on_worker_failure="continue",
        timeout=20.0,
    )
    with Learner(scheme, target_steps=10**6, progress=False) as learner:
        learner.step()
        ray.kill(scheme.gradient_actors[0])
        with pytest.raises(DistributedError, match="gradient worker"):
            for _ in range(200):
                learner.step()
    assert wait_for_cpus(2.0) == pytest.approx(2.0)


@pytest.mark.slow
def test_slow_gradient_workers_are_waited_for(local_ray: None) -> None:
    # Each rollout takes about 64 x 0.02 s, longer than one poll of ray.wait: the learner keeps waiting.
    scheme = make_scheme(
        "impala",
        env_factory=SlowGymEnv,
        env_args={"env": "CartPole-v1", "delay": 0.02},
        collection={"n_envs": 2},
        gradients={"remote_workers": 2, "communication": "asynchronous"},
    )
    with Learner(scheme, target_steps=256, progress=False) as learner:
        train(learner)
    assert learner.updates >= 2


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["impala", "sac"])
def test_hung_workers_raise_after_the_timeout(local_ray: None, algo: str) -> None:
    scheme = make_scheme(
        algo,
        env_factory=SlowGymEnv,
        env_args={"env": "CartPole-v1" if algo == "impala" else "Pendulum-v1", "hang_after": 40},
        gradients={"remote_workers": 2, "communication": "asynchronous"},
        timeout=3.0,
    )
    start = time.monotonic()
    with Learner(scheme, target_steps=10**6, progress=False) as learner:
        with pytest.raises(DistributedError, match=r"gradient workers \[0, 1\] sent nothing for 3 s"):
            train(learner)
        raised = time.monotonic()
    # The hung workers would never answer a close call: they are killed, not waited for (3 s more).
    assert time.monotonic() - raised < 1.5
    assert time.monotonic() - start < 60
    assert wait_for_cpus(2.0) == pytest.approx(2.0)


class Blocker:
    """An actor that holds CPUs, so that the scheme's actors cannot start."""

    def ready(self) -> bool:
        return True


@pytest.mark.slow
def test_actors_that_cannot_start_fail_within_start_timeout(local_ray: None) -> None:
    blocker = ray.remote(num_cpus=2)(Blocker).remote()
    ray.get(blocker.ready.remote(), timeout=60)  # running: it holds both CPUs
    start = time.monotonic()
    with pytest.raises(DistributedError, match=r"collection workers \[0, 1\] were not running 2 s after"):
        make_scheme(collection={"remote_workers": 2}, start_timeout=2.0)
    elapsed = time.monotonic() - start
    ray.kill(blocker)
    # The actors that never started are killed at once, not sent a close call and waited for (10 s).
    assert elapsed < 2.0 + 3.0, elapsed
    assert wait_for_cpus(2.0) == pytest.approx(2.0)


@pytest.mark.slow
def test_a_decentralised_scheme_fixes_its_failure_policy_and_reads_weights_without_writing(
    local_ray: None,
) -> None:
    scheme = make_scheme(
        gradients={"remote_workers": 2}, updates={"execution": "decentralised"}, on_worker_failure="continue"
    )
    with scheme:
        # A lost member breaks the group: the pool raises from the start, and that cannot be rewritten.
        assert scheme.pool.on_failure == "raise"
        with pytest.raises(AttributeError):
            scheme.pool.on_failure = "continue"
        initial = {k: v.clone() for k, v in scheme.model.state_dict().items()}
        for _ in range(2):
            scheme.step()
        trained = scheme.weights()
        assert scheme.pool.on_failure == "raise"
    assert not all(torch.equal(trained[k], initial[k]) for k in initial)  # the workers' weights moved
    assert all(torch.equal(v, initial[k]) for k, v in scheme.model.state_dict().items())  # model untouched


@pytest.mark.slow
def test_decentralised_scheme_reports_zero_gradient_asynchrony(local_ray: None) -> None:
    scheme = make_scheme(gradients={"remote_workers": 2}, updates={"execution": "decentralised"})
    with Learner(scheme, target_steps=10**6, progress=False) as learner:
        infos = [learner.step() for _ in range(3)]
        metrics = learner.metrics()
    assert [info.gradient_asynchrony for info in infos] == [[0, 0]] * 3  # both workers, in step
    assert metrics["gradient_asynchrony"] == 0 and metrics["updates"] == 3 == scheme.version


@pytest.mark.slow
def test_asynchronous_updates_count_every_gradient_applied(local_ray: None, tmp_path: Path) -> None:
    scheme = make_scheme("impala", gradients={"remote_workers": 2, "communication": "asynchronous"})
    with Learner(scheme, target_steps=10**6, progress=False) as learner:
        # Both workers' gradients are ready before the step: it applies the two of them.
        for i in scheme.pool.idle():
            scheme.pool.submit(i, "compute_gradients")
        ray.wait(list(scheme.pool.pending), num_returns=2, timeout=60)
        first = learner.step()
        infos = [first] + [learner.step() for _ in range(4)]
        path = learner.save_model(tmp_path / "model.pt")
    assert first.updates == 2 and first.version == 2 and len(first.gradient_asynchrony) == 2
    assert learner.updates == sum(info.updates for info in infos) == scheme.version
    assert load_checkpoint(path)["updates"] == scheme.version


@pytest.mark.slow
def test_gpu_request_on_a_cpu_cluster_fails_at_once(local_ray: None) -> None:
    start = time.monotonic()
    with pytest.raises(
        DistributedError, match=r"asks for 1 GPU \(gradients.worker_gpus\).*largest node.*has 0"
    ):
        make_scheme(gradients={"remote_workers": 1, "worker_gpus": 1.0})
    with pytest.raises(DistributedError, match=r"ask for 3 CPU in all"):
        make_scheme(collection={"remote_workers": 3, "worker_cpus": 1.0})
    assert time.monotonic() - start < 10
    assert wait_for_cpus(2.0) == pytest.approx(2.0)


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_schemes_learn_the_same(local_ray: None, codec: str) -> None:
    # Compression is lossless: with synchronous everything, the runs are identical.
    results = []
    for compression in ("none", codec):
        scheme = make_scheme(
            collection={"remote_workers": 1}, gradients={"remote_workers": 1}, compression=compression
        )
        with Learner(scheme, target_steps=1024, progress=False) as learner:
            train(learner)
            results.append((scheme.weights(), learner.metrics()))
    (plain, plain_metrics), (packed, packed_metrics) = results
    assert all(torch.equal(plain[k], packed[k]) for k in plain)
    assert packed_metrics["raw_bytes"] == plain_metrics["raw_bytes"] > 0
    assert packed_metrics["sent_bytes"] != plain_metrics["sent_bytes"]
    # the rollouts of the remote collection worker are counted too, where compression pays most
    assert packed_metrics["rollout_raw_bytes"] == plain_metrics["rollout_raw_bytes"] > 0
    assert plain_metrics["rollout_bytes"] == plain_metrics["rollout_raw_bytes"]
    assert packed_metrics["rollout_bytes"] < packed_metrics["rollout_raw_bytes"]


@pytest.mark.slow
def test_remote_local_steps_equal_single_steps(local_ray: None) -> None:
    single, _ = _local_steps_run(1, collection={"remote_workers": 1}, gradients={"remote_workers": 1})
    weights, updates = _local_steps_run(
        10, collection={"remote_workers": 1}, gradients={"remote_workers": 1}
    )  # a round trip per batch, not per minibatch
    assert updates == [10, 10]
    assert all(torch.equal(weights[name], single[name]) for name in single)


@pytest.mark.slow
def test_local_steps_of_two_workers_average_their_parameters_and_learn(local_ray: None) -> None:
    scheme = make_scheme(collection={"remote_workers": 1}, gradients={"remote_workers": 2, "local_steps": 5})
    with Learner(scheme, target_steps=10_000, progress=False) as learner:
        first = learner.step()
        returns = first.episode_returns + train(learner)
        metrics = learner.metrics()
    assert first.updates == 5 and first.gradient_asynchrony == [0, 0]
    assert metrics["updates"] == scheme.version and metrics["updates"] % 5 == 0
    assert metrics["policy_lag"] == 0 and metrics["sent_bytes"] > 0
    assert _mean(returns[-10:]) > 1.5 * _mean(returns[:10]), returns


@pytest.mark.slow
def test_learner_saves_the_model_and_changes_parameters_everywhere(local_ray: None, tmp_path: Path) -> None:
    scheme = make_scheme(gradients={"remote_workers": 2}, updates={"execution": "decentralised"})
    with Learner(scheme, target_steps=10**6, progress=False) as learner:
        learner.step()
        learner.update_algorithm_parameter("lr", 0.0)  # the workers apply the updates: all must stop
        before = scheme.weights()
        for _ in range(5):
            learner.step()
        after = scheme.weights()
        path = learner.save_model(tmp_path / "model.pt")
        with pytest.raises(ValueError, match="name must be one of"):
            learner.update_algorithm_parameter("momentum", 0.9)
    assert all(torch.equal(before[k], after[k]) for k in before)
    saved = load_checkpoint(path)
    assert saved["updates"] == 6 and all(torch.equal(saved["model"][k], after[k]) for k in after)


def test_a_scheme_whose_ray_was_shut_down_says_so(local_ray: None) -> None:
    """Before, a step after ray.shutdown() started a new Ray instance and failed in Ray ("Failed to submit
    task to actor"), and closing the scheme after Ray was started again raised ActorHandleNotFoundError."""
    remote = {"collection": {"n_envs": 2, "remote_workers": 1}, "gradients": {"remote_workers": 1}}
    shut, restarted = make_scheme(**remote), make_scheme(**remote)  # type: ignore[arg-type]
    shut.step()
    ray.shutdown()
    try:
        with pytest.raises(
            DistributedError, match=r"Scheme\.step: Ray was shut down \(ray\.shutdown\(\)\) while"
        ):
            shut.step()
        assert not ray.is_initialized()  # no other instance started behind the user's back
        with pytest.raises(DistributedError, match=r"Scheme\.set_parameter: Ray was shut down"):
            shut.set_parameter("lr", 0.1)
        shut.close()  # nothing left to stop
        shut.close()
    finally:
        start_local_ray()  # for the tests after this one
    with pytest.raises(DistributedError, match=r"Scheme\.step: Ray was shut down"):
        restarted.step()  # its actors went with the first instance
    restarted.close()
    assert wait_for_cpus(2.0) == pytest.approx(2.0)


def test_no_removed_ray_api_is_used() -> None:
    source = "\n".join(p.read_text() for p in (TESTS.parent / "rlstruct" / "distributed").glob("*.py"))
    for removed in ("local_mode", "ray.internal", "redis", "ray.worker.global_worker"):
        assert removed not in source, removed
    assert re.search(r"ray\.init\(", source)  # the scheme connects with a plain ray.init()


def test_every_option_is_documented() -> None:
    doc = Scheme.__doc__ or ""
    for name in inspect.signature(Scheme).parameters:
        assert f"    {name}:" in doc, name
    for cls in (Collection, Gradients, Updates):
        docs = field_docs(cls)
        assert sorted(docs) == sorted(f.name for f in dataclasses.fields(cls)), cls
        assert all(len(text) > 20 for text in docs.values()), docs


class _Method:
    def remote(self, *args: Any) -> str:
        return "ref"


class _Actor:
    compute_gradients = _Method()


@pytest.mark.skipif(
    not hasattr(ray.exceptions, "ActorUnavailableError"), reason="Ray < 2.11 has no ActorUnavailableError"
)
def test_an_unreachable_actor_is_lost_like_a_dead_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(ref: Any, **kwargs: Any) -> Any:
        raise ray.exceptions.ActorUnavailableError("the network went down", None)

    monkeypatch.setattr(_pool.ray, "get", unreachable)
    pool = _pool.Pool("gradient", [_Actor(), _Actor()], on_failure="raise", timeout=1.0)
    pool.submit(1, "compute_gradients")
    with pytest.raises(
        RemoteWorkerError, match=r"gradient worker 1: unreachable: .*the network went down"
    ) as caught:
        pool._get("ref", 1)
    assert caught.value.died
    pool = _pool.Pool("gradient", [_Actor(), _Actor()], on_failure="continue", timeout=1.0)
    pool.submit(1, "compute_gradients")
    assert pool._get("ref", 1) == (False, None)
    assert pool.lost == [1] and list(pool.alive) == [0] and not pool.pending


def test_a_lost_actor_died_on_a_ray_without_actor_unavailable_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # pyproject.toml allows ray>=2.10; ActorUnavailableError came with Ray 2.11, and before it every lost
    # actor raised a plain RayActorError: the pool must not need the newer class
    monkeypatch.delattr(ray.exceptions, "ActorUnavailableError", raising=False)

    def dead(ref: Any, **kwargs: Any) -> Any:
        raise ray.exceptions.RayActorError()

    monkeypatch.setattr(_pool.ray, "get", dead)
    pool = _pool.Pool("gradient", [_Actor(), _Actor()], on_failure="raise", timeout=1.0)
    pool.submit(0, "compute_gradients")
    with pytest.raises(RemoteWorkerError, match=r"gradient worker 0: died: ") as caught:
        pool._get("ref", 0)
    assert caught.value.died
    pool = _pool.Pool("gradient", [_Actor(), _Actor()], on_failure="continue", timeout=1.0)
    pool.submit(0, "compute_gradients")
    assert pool._get("ref", 0) == (False, None)
    assert pool.lost == [0] and list(pool.alive) == [1]


# Agents the schemes did not build: memory, history, your own (tests/own_agents.py).

RECURRENT_ARGS = {"obs_dim": 4, "n_actions": 2, "hidden": (16, 16), "recurrent": True}
HISTORY_ARGS = {"obs_dim": 4, "n_actions": 2, "n": 4}


def memory_scheme(algo: str, agent: Any, agent_args: dict[str, Any], **collection: Any) -> Scheme:
    """A scheme of 8 x 32-step rows training ``agent`` with PPO (minibatches of 4 rows) or IMPALA."""
    factories = (
        (IMPALA, WholeBatchBuffer)
        if algo == "impala"
        else (PPO, functools.partial(MinibatchBuffer, n_epochs=2, minibatch_size=128))
    )
    return Scheme(
        agent,
        agent_args,
        GymEnv,
        CARTPOLE,
        *factories,
        collection=Collection(**{"n_envs": 8, "n_steps": 32, "worker_cpus": 0.2, **collection}),
        gradients=Gradients(worker_cpus=0.2),
        timeout=60.0,
    )


@pytest.mark.parametrize("algo", ["ppo", "impala"])
@pytest.mark.parametrize(
    ("agent", "agent_args"),
    [(ActorCritic, RECURRENT_ARGS), (WindowAgent, HISTORY_ARGS), (GruAgent, {"obs_dim": 4, "n_actions": 2})],
    ids=["recurrent ActorCritic", "history agent", "own GRU agent"],
)
def test_a_scheme_trains_agents_with_memory_and_history_in_process(
    algo: str, agent: Any, agent_args: dict[str, Any]
) -> None:
    scheme = memory_scheme(algo, agent, agent_args)
    first = scheme.weights()
    with Learner(scheme, target_steps=512, progress=False) as learner:
        infos = [learner.step() for _ in range(2)]
        last = scheme.weights()
    assert all(info.updates >= 1 for info in infos)
    assert not all(torch.equal(first[k], last[k]) for k in first)  # trained through whole rows
    assert all(bool(torch.isfinite(v).all()) for v in last.values())
    if algo == "ppo":  # a stateful or history agent's minibatches are rows: 8 rows of 32, 4 a minibatch
        buffer = scheme.local.buffer if scheme.local is not None else None
        assert buffer is not None and len(buffer) == 2 * 2


def test_the_history_agent_trains_with_two_remote_collection_workers(local_ray: None) -> None:
    scheme = memory_scheme("ppo", WindowAgent, HISTORY_ARGS, n_envs=4, remote_workers=2)
    first = scheme.weights()
    with Learner(scheme, target_steps=512, progress=False) as learner:
        while not learner.done():
            learner.step()
        assert learner.env_steps == 512
        last = scheme.weights()
    assert not all(torch.equal(first[k], last[k]) for k in first)


def test_a_recurrent_actor_critic_trains_with_two_remote_collection_workers(local_ray: None) -> None:
    scheme = memory_scheme("ppo", ActorCritic, RECURRENT_ARGS, n_envs=4, remote_workers=2)
    with Learner(scheme, target_steps=512, progress=False) as learner:
        while not learner.done():
            learner.step()
        assert learner.env_steps == 512 and learner.metrics()["policy_lag"] == 0


@pytest.mark.parametrize("algo", [PPO, IMPALA])
def test_an_agent_the_algorithm_cannot_train_is_refused_when_the_scheme_is_made(algo: Any) -> None:
    name = algo.__name__
    with pytest.raises(TypeError, match=f"{name} cannot train NoBootstrapAgent: it lacks bootstrap_values"):
        Scheme(NoBootstrapAgent, {"obs_dim": 4, "n_actions": 2}, GymEnv, CARTPOLE, algo, WholeBatchBuffer)
    with pytest.raises(TypeError, match=f"{name} trains an Agent \\(rlstruct.Agent\\), got a Linear"):
        algo(torch.nn.Linear(4, 2))


def test_the_minibatch_buffer_serves_whole_rows_of_trajectories() -> None:
    steps = TemporalDictTensor({"i": torch.arange(5).unsqueeze(1).expand(5, 8)})
    rows = Trajectories(DictTensor(batch_size=5), steps)
    buffer = MinibatchBuffer(n_epochs=2, minibatch_size=16, seed=0)  # 16 steps: 2 rows of 8
    buffer.insert(rows)
    batches = list(buffer.minibatches())
    assert [b.n_elems() for b in batches] == [2, 2, 1] * 2 and len(buffer) == 6
    for epoch in range(2):
        seen = torch.cat([b.trajectories["i"][:, 0] for b in batches[3 * epoch : 3 * epoch + 3]])
        assert sorted(seen.tolist()) == list(range(5))
    with pytest.raises(TypeError, match="data must be a DictTensor or Trajectories, got a list"):
        buffer.insert([1, 2])  # type: ignore[arg-type]


def test_collection_workers_of_one_scheme_and_of_other_seeds_never_share_episodes() -> None:
    small = Collection(n_envs=2, n_steps=8)

    def first_observations(index: int, seed: int) -> torch.Tensor:
        worker = CollectionWorker(index, ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, small, seed=seed)
        try:
            worker.set_weights(ActorCritic(**AGENT_ARGS).state_dict(), 0)
            return worker.collect().trajectories().trajectories["observation"][:, 0]
        finally:
            worker.close()

    one, two = first_observations(0, seed=0), first_observations(1, seed=0)
    assert not torch.equal(one, two)
    # seed + index * n_envs gave worker 1 of seed 0 the environments of worker 0 of seed 2
    assert not torch.equal(two, first_observations(0, seed=2))
    assert torch.equal(one, first_observations(0, seed=0))  # and a seed still fixes them


def test_gradient_workers_of_one_scheme_shuffle_apart() -> None:
    def buffer_order(index: int, seed: int) -> list[int]:
        worker = GradientWorker(
            index,
            ActorCritic,
            AGENT_ARGS,
            PPO,
            functools.partial(MinibatchBuffer, n_epochs=1, minibatch_size=4),
            lambda: CollectionWorker(0, ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, Collection(n_envs=1)),
            seed=seed,
        )
        try:
            worker.buffer.insert(DictTensor({"i": torch.arange(16)}))
            return torch.cat([b["i"] for b in worker.buffer.minibatches()]).tolist()
        finally:
            worker.close()

    assert buffer_order(0, seed=0) != buffer_order(1, seed=0)
    assert buffer_order(1, seed=0) != buffer_order(0, seed=1)  # seed + index overlapped here
    assert buffer_order(1, seed=0) == buffer_order(1, seed=0)


def test_the_schemes_defaults_are_the_training_scripts_defaults() -> None:
    from rlstruct.algos import impala, ppo

    for algo, config in ((PPO, ppo.Config()), (IMPALA, impala.Config())):
        defaults = {
            name: p.default
            for name, p in inspect.signature(algo).parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        assert defaults and all(getattr(config, name) == value for name, value in defaults.items()), algo


def test_a_scheme_keeps_the_running_observation_statistics_of_its_model() -> None:
    args = {**RECURRENT_ARGS, "normalize": True}
    scheme = memory_scheme("ppo", ActorCritic, args)
    with Learner(scheme, target_steps=512, progress=False) as learner:
        while not learner.done():
            learner.step()
        weights = scheme.weights()
    # every collected step merged once, after the update that used its batch, as ppo.train does
    assert weights["obs_norm.count"].item() == 512
    assert not torch.equal(weights["obs_norm.mean"], torch.zeros(4, dtype=torch.float64))


def test_flags_take_numpy_bools() -> None:
    """A NumPy bool is a bool: it was refused as "must be a bool, got a bool"."""
    algorithm = IMPALA(ActorCritic(**AGENT_ARGS), normalize_advantages=np.False_)
    assert algorithm.normalize_advantages is False
    algorithm.set_parameter("normalize_advantages", np.True_)
    assert algorithm.normalize_advantages is True
    with pytest.raises(TypeError, match=re.escape("normalize_advantages must be a bool, got a float64")):
        algorithm.set_parameter("normalize_advantages", np.float64(1.0))
