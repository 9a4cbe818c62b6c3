"""rlstruct.distributed on a simulated 2-node Ray cluster (``ray.cluster_utils.Cluster``, one machine).

Each node has one CPU and each collection worker asks for one, so Ray must
place the two collection workers on different nodes; the scheme trains
across them, and goes on when one node is lost.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from rlstruct import GymEnv
from rlstruct.distributed import PPO, Collection, Gradients, Learner, MinibatchBuffer, Scheme
from rlstruct.learning.actor_critic import ActorCritic

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.slow


@pytest.fixture
def two_nodes() -> Iterator[Any]:
    if ray.is_initialized():
        ray.shutdown()
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    second = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, configure_logging=False)
    cluster.wait_for_nodes()
    try:
        yield cluster, second
    finally:
        ray.shutdown()
        cluster.shutdown()


def make_scheme(gradients: Gradients | None = None, **options: Any) -> Scheme:
    return Scheme(
        ActorCritic,
        {"obs_dim": 4, "n_actions": 2, "orthogonal": True},
        GymEnv,
        {"env": "CartPole-v1"},
        PPO,
        functools.partial(MinibatchBuffer, n_epochs=4, minibatch_size=256),
        collection=Collection(n_envs=8, n_steps=32, remote_workers=2, worker_cpus=1.0),
        gradients=gradients,
        timeout=60.0,
        **options,
    )


def test_collection_workers_spread_over_two_nodes(two_nodes: Any) -> None:
    with Learner(
        make_scheme(Gradients(remote_workers=1, worker_cpus=0.0)), target_steps=4096, progress=False
    ) as learner:
        while not learner.done():
            learner.step()
        nodes = {node for node, _ in learner.scheme.locations["collection"]}
        metrics = learner.metrics()
    assert len(nodes) == 2
    assert metrics["env_steps"] == 4096 and metrics["lost_workers"] == []


def test_a_lost_node_is_reported_and_training_goes_on(two_nodes: Any) -> None:
    cluster, second = two_nodes
    # The gradient worker stays in this process (on the head node), so it cannot be lost with the node.
    with Learner(make_scheme(on_worker_failure="continue"), target_steps=10**6, progress=False) as learner:
        learner.step()
        on_second = [
            i for i, (node, _) in enumerate(learner.scheme.locations["collection"]) if node == second.node_id
        ]
        assert len(on_second) == 1
        cluster.remove_node(second)
        before = learner.env_steps
        for _ in range(40):
            learner.step()
        assert ("collection", on_second[0]) in learner.metrics()["lost_workers"]
        assert learner.env_steps > before
