"""The options of ``fairseq-noise-preview`` (fairseq's own parser) and the task they build."""

import os
import warnings

from fairseq import options, tasks
from fairseq.data import data_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import fairseq_noising.tasks  # noqa: F401  (registers the noised tasks with fairseq's parser)

from ...data.noised_dataset import NoisedDataset
from ...errors import NoisingError
from ...tasks.noising_config import check_data_dir

PREVIEW_TASKS = ("noised_language_modeling", "noised_translation")
PLUGIN_DIR = os.path.dirname(os.path.abspath(fairseq_noising.__file__))

USAGE = (
    "fairseq-noise-preview DATA [--task noised_language_modeling|noised_translation] "
    "--noise-scheme S --noise-gamma G [--seed N] [--epoch E] [--split SPLIT] [task options] "
    "[--output FILE [--force]] [--max-examples K] [--show-examples N] [--top N]"
)


def add_preview_args(parser):
    group = parser.add_argument_group("Preview")
    group.add_argument(
        "--split",
        metavar="SPLIT",
        default=None,
        help="split to preview (default: --train-subset, i.e. train); another split is noised "
        "as if it were the training subset, with its own statistics",
    )
    group.add_argument(
        "--epoch",
        metavar="E",
        type=int,
        default=1,
        help="training epoch (from 1) whose noise to show (default: 1)",
    )
    group.add_argument(
        "--output",
        metavar="FILE",
        default=None,
        help="write every processed example, clean and noised, as JSON Lines to FILE",
    )
    group.add_argument("--force", action="store_true", help="overwrite an existing --output FILE")
    group.add_argument(
        "--max-examples",
        metavar="K",
        type=int,
        default=None,
        help="process only the first K examples (default: all)",
    )
    group.add_argument(
        "--show-examples",
        metavar="N",
        type=int,
        default=3,
        help="number of examples printed with their changes marked (default: 3)",
    )
    group.add_argument(
        "--top",
        metavar="N",
        type=int,
        default=10,
        help="number of most frequent replacement tokens listed per side (default: 10)",
    )
    return group


def get_preview_parser():
    parser = options.get_parser("Preview", default_task="noised_language_modeling")
    parser.description = (
        "Shows the data noising that fairseq-train would apply with the same options "
        "(seed, epoch, task, scheme), without training."
    )
    parser.usage = USAGE
    options.add_dataset_args(parser)
    add_preview_args(parser)
    parser.set_defaults(user_dir=PLUGIN_DIR)

    def error(message):  # one line, like the plugin's other errors, instead of the long usage
        raise NoisingError(f"{message} (see fairseq-noise-preview --help)")

    parser.error = error
    return parser


def parse_args(argv=None):
    parser = get_preview_parser()
    args = options.parse_args_and_arch(parser, input_args=argv)
    check_args(args)
    return args


def check_args(args) -> None:
    """One-line errors for the mistakes caught before any data is read."""
    if args.task not in PREVIEW_TASKS:
        raise NoisingError(
            f"--task {args.task} cannot be previewed; use one of {', '.join(PREVIEW_TASKS)}"
        )
    data_dir = check_data_dir(getattr(args, "data", None))
    if args.epoch < 1:
        raise NoisingError(f"--epoch must be at least 1, got {args.epoch}")
    if args.max_examples is not None and args.max_examples < 1:
        raise NoisingError(f"--max-examples must be at least 1, got {args.max_examples}")
    if args.show_examples < 0:
        raise NoisingError(f"--show-examples must not be negative, got {args.show_examples}")
    if args.top < 0:
        raise NoisingError(f"--top must not be negative, got {args.top}")
    if args.output is not None:
        check_output(args.output, args.force)
    if args.task == "noised_translation" and (args.source_lang is None or args.target_lang is None):
        if None in data_utils.infer_language_pair(data_dir):
            raise NoisingError(
                f"cannot infer the language pair from {data_dir}: pass --source-lang and "
                "--target-lang"
            )
    # the previewed split is loaded as the training subset, so it is noised as in training
    args.split_is_train_subset = args.split in (None, args.train_subset)
    args.split = args.split or args.train_subset
    args.train_subset = args.split


def check_output(path: str, force: bool) -> None:
    if os.path.isdir(path):
        raise NoisingError(f"--output {path} is a directory, not a file")
    if os.path.lexists(path) and not force:
        raise NoisingError(f"output file {path} already exists; pass --force to overwrite it")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise NoisingError(f"cannot write --output {path}: directory {directory} does not exist")


def load_task(args):
    """The task and the previewed split, built the way fairseq-train builds them."""
    with warnings.catch_warnings():  # hydra's deprecation notices about fairseq's own configs
        warnings.simplefilter("ignore")
        cfg = convert_namespace_to_omegaconf(args)
    try:
        task = tasks.setup_task(cfg.task)
        # fairseq-train loads the training subset with combine=True and, with several data
        # directories, the directory of the epoch
        task.load_dataset(args.split, epoch=args.epoch, combine=True)
    except FileNotFoundError as e:  # fairseq's own checks (a dictionary, a split)
        if e.filename:
            raise NoisingError(f"{e.filename} is missing (expected fairseq-preprocess output)")
        raise NoisingError(" ".join(str(e).split()) or "a data file is missing")
    dataset = task.dataset(args.split)
    if isinstance(dataset, NoisedDataset):
        dataset.set_epoch(args.epoch)
    return task, dataset
