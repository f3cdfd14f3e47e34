"""Private selection: the privacy level from an accuracy target (Accuracy First), and
hyper-parameters from private candidates (Liu and Talwar's random stopping).

Ligett, Neel, Roth, Waggoner and Wu (2017), "Accuracy First: Selecting a
Differential Privacy Level for Accuracy-Constrained ERM" (NeurIPS; Neel's
slides in the seed documents). Instead of fixing epsilon and hoping the model
is accurate enough, fix the accuracy and find, privately, the smallest epsilon
that reaches it; the privacy paid depends on where the search stops (ex-post
privacy).

Liu and Talwar (2019), "Private selection from private candidates" (STOC):
run a private candidate algorithm (train and score one hyper-parameter
setting) again and again, stop at random, release only the best; the total
cost is about three times one candidate's (:class:`RandomStopping`).

- :class:`AccuracyFirstClassifier`, :func:`select_output_perturbation`: the
  search (:class:`SelectionResult`, :class:`SelectionStep` record it);
- :func:`laplace_noise_reduction`, :func:`gaussian_noise_reduction`: Laplace
  and Gaussian noise-reduction chains (Koufogiannis et al.);
- :class:`InteractiveAboveThreshold`: the ex-post private check;
- :class:`ExPostCost`, :func:`noise_reduction_prefix_costs`,
  :func:`independent_prefix_costs`: ex-post costs, ``eps_AT`` + prefix cost,
  also when nothing passes;
- :func:`doubling_grid`, :func:`independent_releases`: the doubling baseline
  (independent models at eps_0 2^k);
- :func:`apriori_epsilon_excess_risk`: the a-priori epsilon from output
  perturbation's worst-case bound;
- :class:`RandomStopping`: the best of private candidates (Liu and Talwar
  2019), with its guarantee.

Accuracy First's guarantees are stated for **replace-one** neighbours; a
random-stopping selection's for the relation its candidates are private under.
"""

from privml.selection._accuracy_first import (
    AccuracyFirstClassifier,
    AccuracyFirstWarning,
    epsilon_grid,
    select_output_perturbation,
)
from privml.selection._accuracy_first_result import SelectionResult, SelectionStep
from privml.selection._doubling import doubling_grid, independent_releases
from privml.selection._ex_post import ExPostCost, independent_prefix_costs, noise_reduction_prefix_costs
from privml.selection._interactive_above_threshold import IATOutcome, IATStep, InteractiveAboveThreshold, Release
from privml.selection._noise_reduction import (
    NoiseReductionChain,
    gaussian_noise_reduction,
    laplace_noise_reduction,
)
from privml.selection._random_stopping import RandomStopping, RandomStoppingOutcome
from privml.selection._utility_bound import apriori_epsilon_excess_risk

__all__ = [
    "AccuracyFirstClassifier",
    "AccuracyFirstWarning",
    "ExPostCost",
    "IATOutcome",
    "IATStep",
    "InteractiveAboveThreshold",
    "NoiseReductionChain",
    "RandomStopping",
    "RandomStoppingOutcome",
    "Release",
    "SelectionResult",
    "SelectionStep",
    "apriori_epsilon_excess_risk",
    "doubling_grid",
    "epsilon_grid",
    "gaussian_noise_reduction",
    "independent_prefix_costs",
    "independent_releases",
    "laplace_noise_reduction",
    "noise_reduction_prefix_costs",
    "select_output_perturbation",
]
