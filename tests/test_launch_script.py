"""Reading bash / sbatch launch scripts: env, commands, flags, overrides, each with its line."""

from __future__ import annotations

from memtune.readers.launch.args import parse_override, split_program_args
from memtune.readers.launch.commands import parse_text
from memtune.readers.launch.script import LaunchScript, Word


def parse(text: str) -> LaunchScript:
    return parse_text(text, "job.sh")


def test_export_prefix_and_shell_assignments() -> None:
    script = parse(
        "export A=1 B='two words'\n"
        "C=3\n"
        "export C\n"
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py --x 1\n"
        "unset A\n"
        "python other.py\n"
    )
    by_name = {(s.name, s.how): s for s in script.env}
    assert by_name[("A", "export")].value == "1" and by_name[("A", "export")].line == 1
    assert by_name[("B", "export")].value == "two words"
    assert by_name[("C", "shell")].line == 2
    prefix = by_name[("PYTORCH_CUDA_ALLOC_CONF", "prefix")]
    assert prefix.command_line == 4 and prefix.value == "expandable_segments:True"
    first, second = script.python_commands
    env_first = script.env_for(first)
    assert env_first["PYTORCH_CUDA_ALLOC_CONF"].how == "prefix"
    assert env_first["C"].value == "3"  # `export C` after `C=3` exports the earlier value
    env_second = script.env_for(second)
    assert "A" not in env_second  # unset
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env_second  # a prefix applies to its own command only


def test_quoting_and_continuations_keep_physical_lines() -> None:
    script = parse(
        "#!/bin/bash\n"
        "TP=4\n"
        'srun --container-image="nvcr.io/nvidia/nemo:25.04" \\\n'
        "  python pretrain_gpt.py \\\n"
        "    --tensor-model-parallel-size ${TP} \\\n"
        '    --save "/ckpt/my run" \\\n'
        "    --recompute-modules core_attn mlp \\\n"
        "    --use-nccl-ub\n"
    )
    command = script.training_command()
    assert command is not None and command.launcher == ("srun",) and command.program == "pretrain_gpt.py"
    flags, _ = split_program_args(command.program_args, frozenset({"use-nccl-ub"}))
    assert flags["tensor-model-parallel-size"].values == ("4",) and flags["tensor-model-parallel-size"].line == 5
    assert flags["save"].values == ("/ckpt/my run",) and flags["save"].line == 6
    assert flags["recompute-modules"].values == ("core_attn", "mlp")
    assert flags["use-nccl-ub"].values == () and flags["use-nccl-ub"].line == 8
    assert command.line == 3


def test_arrays_and_unquoted_variables_expand_with_definition_lines() -> None:
    script = parse(
        "GPT_ARGS=(\n"
        "    --num-layers 96\n"
        "    --hidden-size 12288\n"
        ")\n"
        'EXTRA="--micro-batch-size 1 --global-batch-size 1536"\n'
        "torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py ${GPT_ARGS[@]} $EXTRA --bf16\n"
    )
    command = script.training_command()
    flags, _ = split_program_args(command.program_args, frozenset({"bf16"}))
    assert flags["num-layers"].values == ("96",) and flags["num-layers"].line == 2
    assert flags["hidden-size"].line == 3
    assert flags["global-batch-size"].values == ("1536",) and flags["global-batch-size"].line == 5
    assert command.launcher_options["torchrun.nproc_per_node"] == "8"
    assert command.launcher_options["torchrun.nnodes"] == "2"


def test_torchrun_module_and_python_m_distributed_run() -> None:
    script = parse(
        "python -m torch.distributed.run --nproc-per-node=4 -m megatron.bridge.run cfg=x model.tensor_model_parallel_size=2\n"
        "python3 -u finetune.py -tp 2 -pp 1 -vp 2 -cp 1 -ep 4 +peft=lora ++peft.dim=8 ~model.recompute_granularity\n"
    )
    first, second = script.python_commands
    assert first.launcher == ("python -m torch.distributed.run",) and first.program == "-m megatron.bridge.run"
    assert first.launcher_options["torchrun.nproc_per_node"] == "4"
    _, overrides = split_program_args(second.program_args)
    keys = [(o.prefix, o.key, o.value) for o in overrides]
    assert ("", "model.tensor_model_parallel_size", "2") in keys
    assert ("", "model.virtual_pipeline_model_parallel_size", "2") in keys
    assert ("", "model.expert_model_parallel_size", "4") in keys
    assert ("+", "peft", "lora") in keys and ("++", "peft.dim", "8") in keys
    assert ("~", "model.recompute_granularity", None) in keys
    assert all(o.line == 2 for o in overrides)


def test_heredoc_bodies_and_comments_are_skipped() -> None:
    script = parse(
        "cat > notes.txt <<'EOF'\n"
        "export PYTORCH_CUDA_ALLOC_CONF=garbage\n"
        "python fake.py --use-nccl-ub\n"
        "EOF\n"
        "# export PYTORCH_CUDA_ALLOC_CONF=commented\n"
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # trailing comment\n"
        "python real.py\n"
    )
    settings = [s for s in script.env if s.name == "PYTORCH_CUDA_ALLOC_CONF"]
    assert [(s.value, s.line) for s in settings] == [("expandable_segments:True", 6)]
    assert [c.program for c in script.python_commands] == ["real.py"]


def test_bash_c_inner_script_is_parsed() -> None:
    script = parse('srun bash -c "export NCCL_GRAPH_REGISTER=0; python train.py --cuda-graph-impl local"\n')
    assert any(s.name == "NCCL_GRAPH_REGISTER" and s.value == "0" for s in script.env)
    command = script.training_command()
    assert command is not None and command.program == "train.py"


def test_sbatch_directives_and_default_expansion() -> None:
    script = parse(
        "#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --gpus-per-node=8 # comment\n"
        "python train.py --seq-length ${SEQ:-8192} --micro-batch-size $UNKNOWN\n"
    )
    assert script.sbatch["nodes"] == ("4", 2) and script.sbatch["gpus-per-node"] == ("8", 3)
    flags, _ = split_program_args(script.training_command().program_args)
    assert flags["seq-length"].values == ("8192",)
    assert flags["micro-batch-size"].values == ("$UNKNOWN",)  # unknown variables stay literal


def test_operators_and_redirections_split_commands() -> None:
    script = parse("cd /work && python a.py --x 1 > log.txt 2>&1 | tee out; python b.py --y=2 &\n")
    programs = [c.program for c in script.python_commands]
    assert programs == ["a.py", "b.py"]
    flags, _ = split_program_args(script.python_commands[0].program_args)
    assert flags["x"].values == ("1",)


def test_negative_numbers_are_values_not_flags() -> None:
    flags, _ = split_program_args([Word(t, 1) for t in ["--adam-eps", "-1e-8", "--lr", "-3"]])
    assert flags["adam-eps"].values == ("-1e-8",) and flags["lr"].values == ("-3",)


def test_parse_override_forms() -> None:
    assert parse_override("model.x=1").key == "model.x"
    assert parse_override("~model.x").value is None
    assert parse_override("model.x") is None  # no '=' and no '~': not an override
    assert parse_override("--flag=1") is None


def test_branches_with_known_conditions_are_followed() -> None:
    script = parse(
        'DTYPE="bf16"\n'  # 1
        'DATA=${4:-"MOCK"}\n'  # 2  no positional args: the default
        "EXTRA=()\n"  # 3
        'if [[ "$DTYPE" == "fp8" ]]; then\n'  # 4
        '    EXTRA+=("--fp8-format hybrid")\n'  # 5
        'elif [ "$DATA" = "MOCK" ]; then\n'  # 6
        "    EXTRA+=(--mock-data)\n"  # 7
        "else\n"  # 8
        "    EXTRA+=(--data-path /data)\n"  # 9
        "fi\n"  # 10
        'if [[ "$UNSET_VAR" == "x" ]]; then\n'  # 11 unknown: kept (conservative)
        "    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
        "fi\n"
        "python train.py ${EXTRA[@]}\n"
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset({"mock-data"}))
    assert set(flags) == {"mock-data"} and flags["mock-data"].line == 7
    assert any(s.name == "PYTORCH_CUDA_ALLOC_CONF" for s in script.env)


def test_array_append_and_unquoted_element_splitting_keep_lines() -> None:
    script = parse(
        "ARGS=(\n"
        "    --micro-batch-size 1\n"
        ")\n"
        "DDP=(--use-distributed-optimizer)\n"
        'ARGS+=("${DDP[@]}")\n'
        'ARGS+=("--fp8-format hybrid")\n'
        "python train.py ${ARGS[@]}\n"
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset({"use-distributed-optimizer"}))
    assert flags["micro-batch-size"].line == 2
    assert flags["use-distributed-optimizer"].line == 4  # where DDP is defined
    assert flags["fp8-format"].values == ("hybrid",) and flags["fp8-format"].line == 6


def test_arithmetic_expansion() -> None:
    script = parse("N=16\nM=$(($N-1))\nW=$(( N * 8 / 3 ))\nBAD=$((N / 0))\npython t.py --a $M --b $W --c $BAD\n")
    flags, _ = split_program_args(script.training_command().program_args)
    assert flags["a"].values == ("15",) and flags["b"].values == ("42",)
    assert flags["c"].values == ("$((N / 0))",)  # left literal when it cannot be evaluated


def _flag_values(script: LaunchScript, *names: str) -> dict[str, str | None]:
    flags, _ = split_program_args(script.training_command().program_args, frozenset())
    return {name: (flags[name].value if name in flags else None) for name in names}


def test_case_on_a_known_word_takes_the_first_matching_clause() -> None:
    script = parse(
        'SIZE="8b"\n'
        'case "$SIZE" in\n'
        "  800m|1b) TP=1; LAYERS=48 ;;\n"
        "  8*)\n"
        "    TP=4\n"
        "    LAYERS=56\n"
        "    ;;\n"
        "  *) TP=8; LAYERS=96 ;;\n"
        "esac\n"
        "python train.py --tensor-model-parallel-size $TP --num-layers $LAYERS\n"
    )
    assert _flag_values(script, "tensor-model-parallel-size", "num-layers") == {
        "tensor-model-parallel-size": "4",
        "num-layers": "56",
    }
    flags, _ = split_program_args(script.training_command().program_args, frozenset())
    assert flags["num-layers"].assumed == ()  # a decided branch is no guess


def test_case_alternatives_and_the_catch_all() -> None:
    clauses = (
        'case "$SIZE" in\n  800m|1b) TP=1 ;;\n  *) TP=8 ;;\nesac\npython train.py --tensor-model-parallel-size $TP\n'
    )
    assert _flag_values(parse('SIZE="1b"\n' + clauses), "tensor-model-parallel-size") == {
        "tensor-model-parallel-size": "1"
    }
    assert _flag_values(parse('SIZE="70b"\n' + clauses), "tensor-model-parallel-size") == {
        "tensor-model-parallel-size": "8"
    }


def test_case_on_an_unknown_word_marks_the_value_as_a_branch_guess() -> None:
    script = parse(
        'case "$1" in\n  small) TP=1 ;;\n  big) TP=8 ;;\nesac\npython train.py --tensor-model-parallel-size $TP\n'
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset())
    flag = flags["tensor-model-parallel-size"]
    assert flag.value == "8"  # the last value the script sets, as for an undecided if
    assert flag.assumed and all("only known at run time" in note for note in flag.assumed)


def test_an_array_extended_with_itself_keeps_its_earlier_elements() -> None:
    script = parse(
        "ARGS=(\n"  # 1
        "  --bf16\n"  # 2
        "  --global-batch-size 128\n"  # 3
        ")\n"
        'ARGS=("${ARGS[@]}" --use-nccl-ub)\n'  # 5
        'python train.py "${ARGS[@]}"\n'
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset({"bf16", "use-nccl-ub"}))
    assert set(flags) == {"bf16", "global-batch-size", "use-nccl-ub"}
    assert flags["global-batch-size"].value == "128" and flags["global-batch-size"].line == 3
    assert flags["use-nccl-ub"].line == 5


def test_an_unset_variable_default_is_reported_as_an_assumption() -> None:
    script = parse('NNODES=${SLURM_NNODES:-"1"}\ntorchrun --nnodes $NNODES --nproc_per_node 8 train.py --bf16\n')
    command = script.training_command()
    nnodes = next(word for word in command.words if word.text == "1")
    assert any("SLURM_NNODES is not set" in note for note in nnodes.assumed)


def test_bash_options_before_c_and_combined_lc() -> None:
    for line in (
        'bash -x -c "python train.py --num-layers 4"\n',
        "bash -lc 'python train.py --num-layers 4'\n",
        'sh -e -o pipefail -c "python train.py --num-layers 4"\n',
        'srun --mpi=pmix bash --norc -c "python train.py --num-layers 4"\n',
    ):
        command = parse(line).training_command()
        assert command is not None and command.program == "train.py", line
        assert _flag_values(parse(line), "num-layers") == {"num-layers": "4"}
    # no -c: `bash -x run.sh` runs a file, there is no inline script to read
    assert parse('bash -x run.sh "python train.py"\n').training_command() is None


def _tp_after(condition: str, prelude: str = "") -> str | None:
    script = parse(
        f"{prelude}TP=1\nif {condition}; then\n  TP=8\nfi\npython train.py --tensor-model-parallel-size $TP\n"
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset())
    flag = flags["tensor-model-parallel-size"]
    return None if flag.assumed else flag.value


def test_compound_conditions_are_evaluated_when_every_operand_is_known() -> None:
    known = 'A="x"\nB=""\n'
    assert _tp_after('[[ "$A" == "y" ]] || [[ "$A" == "x" ]]', known) == "8"
    assert _tp_after('[ "$A" = x ] && [ -z "$B" ]', known) == "8"
    assert _tp_after('[ "$A" = x ] && [ -n "$B" ]', known) == "1"
    assert _tp_after('[[ "$A" == x && -n "$B" ]]', known) == "1"
    assert _tp_after('[[ "$A" == y || -z "$B" ]]', known) == "8"
    assert _tp_after('[[ -n "$A" && ( "$B" == x ) ]]', known) is None  # not understood: unknown, a guess
    # an unknown operand decides nothing ...
    assert _tp_after('[ "$A" = x ] && [ "$UNSET" = 1 ]', known) is None
    # ... unless the known side settles the list alone (false && ?, true || ?)
    assert _tp_after('[ "$A" = y ] && [ "$UNSET" = 1 ]', known) == "1"
    assert _tp_after('[ "$A" = x ] || [ "$UNSET" = 1 ]', known) == "8"
    # shell lists bind left to right: (true || ?) && false is false
    assert _tp_after('[ "$A" = x ] || [ "$UNSET" = 1 ] && [ "$A" = y ]', known) == "1"


def test_compound_elif_and_a_single_word_test() -> None:
    script = parse(
        'MODE="sft"\n'
        'if [ "$MODE" = pretrain ] || [ "$MODE" = cpt ]; then\n  TP=1\n'
        'elif [ "$MODE" = sft ] && [ "$MODE" ]; then\n  TP=2\n'
        "else\n  TP=4\nfi\n"
        "python train.py --tensor-model-parallel-size $TP\n"
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset())
    assert flags["tensor-model-parallel-size"].value == "2" and flags["tensor-model-parallel-size"].assumed == ()


def test_a_value_every_undecided_branch_sets_alike_is_no_guess() -> None:
    script = parse(
        'if [ "$1" = small ]; then\n'  # undecided: a script argument
        "  VOCAB=128256\n  TP=1\n"
        'elif [ "$1" = mid ]; then\n'
        "  VOCAB=128256\n  TP=2\n"
        "else\n"
        "  VOCAB=128256\n  TP=8\n"
        "fi\n"
        "python train.py --vocab-size $VOCAB --tensor-model-parallel-size $TP\n"
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset())
    assert flags["vocab-size"].value == "128256" and flags["vocab-size"].assumed == ()
    assert any("only known at run time" in note for note in flags["tensor-model-parallel-size"].assumed)


def test_alike_values_without_an_else_or_in_a_case_stay_guesses_unless_exhaustive() -> None:
    no_else = parse(
        'VOCAB=1\nif [ "$1" = a ]; then\n  VOCAB=2\nelif [ "$1" = b ]; then\n  VOCAB=2\nfi\n'
        "python train.py --vocab-size $VOCAB\n"
    )
    flags, _ = split_program_args(no_else.training_command().program_args, frozenset())
    assert flags["vocab-size"].assumed  # neither branch may run: VOCAB may stay 1
    case = (
        'case "$1" in\n  a) VOCAB=2; TP=1 ;;\n  b) VOCAB=2; TP=2 ;;\n{rest}esac\n'
        "python train.py --vocab-size $VOCAB --tensor-model-parallel-size $TP\n"
    )
    flags, _ = split_program_args(parse(case.format(rest="  *) VOCAB=2; TP=8 ;;\n")).training_command().program_args)
    assert flags["vocab-size"].assumed == () and flags["tensor-model-parallel-size"].assumed
    flags, _ = split_program_args(parse(case.format(rest="")).training_command().program_args)
    assert flags["vocab-size"].assumed


def test_alike_values_in_nested_undecided_branches() -> None:
    script = parse(
        'if [ "$1" = a ]; then\n'
        '  if [ "$2" = x ]; then\n    VOCAB=7\n  else\n    VOCAB=7\n  fi\n'
        "else\n  VOCAB=7\nfi\n"
        'if [ "$1" = a ]; then\n'
        '  if [ "$2" = x ]; then\n    TP=1\n  else\n    TP=2\n  fi\n'
        "else\n  TP=1\nfi\n"
        "python train.py --vocab-size $VOCAB --tensor-model-parallel-size $TP\n"
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset())
    assert flags["vocab-size"].value == "7" and flags["vocab-size"].assumed == ()
    assert flags["tensor-model-parallel-size"].assumed


def test_a_condition_on_a_guessed_value_stays_undecided() -> None:
    script = parse(
        'if [ "$1" = a ]; then\n  DO=true\nfi\n'
        'if [ "$DO" = true ]; then\n  OPTS="--use-distributed-optimizer"\nfi\n'
        "python train.py $OPTS\n"
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset({"use-distributed-optimizer"}))
    assert any("OPTS is set on line 5" in note for note in flags["use-distributed-optimizer"].assumed)


def test_flags_cut_from_a_built_string_keep_their_own_line_and_notes() -> None:
    script = parse(
        'if [ "$1" = big ]; then\n'  # 1
        "  LAYERS=80\n"  # 2
        "else\n"
        "  LAYERS=24\n"  # 4
        "fi\n"
        "SEQ=${SEQ_LEN:-4096}\n"  # 6
        'opts="  \\\n'  # 7
        "  --num-layers ${LAYERS} \\\n"  # 8
        "  --seq-length ${SEQ} \\\n"  # 9
        '  --micro-batch-size 1"\n'  # 10
        'run_cmd="torchrun --nproc_per_node 8 train.py ${opts}"\n'  # 11
        "eval ${run_cmd}\n"  # 12
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset())
    layers, seq, mbs = flags["num-layers"], flags["seq-length"], flags["micro-batch-size"]
    assert (layers.line, seq.line, mbs.line) == (8, 9, 10)
    assert len(layers.assumed) == 1 and "LAYERS is set on line 4" in layers.assumed[0]
    assert len(seq.assumed) == 1 and "SEQ_LEN is not set" in seq.assumed[0]
    assert mbs.assumed == ()  # a literal in the string: nothing assumed, whatever else the string holds


def test_bash_c_on_a_built_command_reads_each_flag_apart() -> None:
    script = parse(
        "TP=${TP:-2}\n"  # 1
        "ARGS=(\n"  # 2
        "  --tensor-model-parallel-size ${TP}\n"  # 3
        "  --num-layers 4\n"  # 4
        ")\n"
        'CMD="cd /w; python pretrain_gpt.py ${ARGS[@]}"\n'  # 6
        'srun bash -x -c "${CMD}"\n'  # 7
    )
    flags, _ = split_program_args(script.training_command().program_args, frozenset())
    assert flags["tensor-model-parallel-size"].value == "2" and flags["tensor-model-parallel-size"].line == 3
    assert any("TP is not set" in note for note in flags["tensor-model-parallel-size"].assumed)
    assert flags["num-layers"].line == 4 and flags["num-layers"].assumed == ()


def test_an_unquoted_sbatch_heredoc_is_the_job_expanded_at_submission() -> None:
    script = parse(
        "TP=4\n"  # 1
        "export NCCL_DEBUG=WARN\n"  # 2
        'ARGS="--tensor-model-parallel-size ${TP} --num-layers 8"\n'  # 3
        "sbatch <<EOF\n"  # 4
        "#!/bin/bash\n"  # 5
        "#SBATCH --nodes=2\n"  # 6
        'srun bash -c "python train.py ${ARGS} --seed \\$SEED" 2>&1 | tee \\${SLURM_JOB_ID}.log\n'  # 7
        "EOF\n"
    )
    command = script.training_command()
    assert command is not None and command.program == "train.py" and command.line == 7
    flags, _ = split_program_args(command.program_args, frozenset())
    assert flags["tensor-model-parallel-size"].value == "4" and flags["tensor-model-parallel-size"].line == 3
    assert flags["seed"].value == "$SEED"  # escaped for the job, which does not set it
    assert script.sbatch["nodes"][0] == "2"


def test_a_quoted_heredoc_is_read_as_written_in_a_new_shell() -> None:
    script = parse(
        "export MBS=2\n"  # exported: the job inherits it
        "TP=4\n"  # not exported: the job's shell does not see it
        "bash <<'EOF'\n"
        "LAYERS=12\n"
        "python train.py --micro-batch-size $MBS --tensor-model-parallel-size $TP --num-layers $LAYERS\n"
        "EOF\n"
    )
    values = _flag_values(script, "micro-batch-size", "tensor-model-parallel-size", "num-layers")
    assert values == {"micro-batch-size": "2", "tensor-model-parallel-size": "$TP", "num-layers": "12"}
    assert script.training_command().line == 5


def test_heredocs_fed_to_other_programs_or_inline_shells_stay_unread() -> None:
    for owner in ("cat > job.sh", "python -", "bash -c 'echo hi'", "bash run.sh", "tee x.sh"):
        script = parse(f"{owner} <<EOF\npython train.py --num-layers 4\nEOF\n")
        assert script.training_command() is None, owner
    for owner in ("srun --nodes 1 bash", "sbatch --nodes=2", "bash -s", "sh -x", "zsh"):
        script = parse(f"{owner} <<-EOF\n\tpython train.py --num-layers 4\n\tEOF\n")
        assert _flag_values(script, "num-layers") == {"num-layers": "4"}, owner


def test_a_heredoc_in_a_branch_that_cannot_run_is_not_read() -> None:
    script = parse('MODE=dry\nif [ "$MODE" = run ]; then\n  sbatch <<EOF\npython train.py --num-layers 4\nEOF\nfi\n')
    assert script.training_command() is None


def test_a_command_substitution_is_recorded_where_it_runs_with_what_it_may_pass() -> None:
    script = parse(
        'OVR="model.tensor_model_parallel_size=$TP train.global_batch_size=64 --seq-length 4096"\n'  # 1
        'CMD="python run.py"\n'  # 2
        "CMD=\"$CMD $(echo \"$OVR\" | tr '\\n' ' ')\"\n"  # 3
        "N=`nproc`\n"  # 4
        'bash -c "$CMD"\n'  # 5
    )
    command = script.training_command()
    assert command is not None and command.program == "run.py"
    assert any("$(echo" in word.text for word in command.program_args)  # kept as written, never run
    subs = {text.split()[0]: found for text, found in script.substitutions.items()}
    assert subs["$(echo"] == (3, ("model.tensor_model_parallel_size", "train.global_batch_size", "seq-length"))
    assert subs["`nproc`"] == (4, ())
    _, overrides = split_program_args(command.program_args)
    assert overrides == []  # nothing is invented from the substitution's text


def test_an_assumption_behind_many_settings_is_one_note_with_a_count(tmp_path) -> None:
    from memtune.readers import run_view

    path = tmp_path / "job.sh"
    path.write_text(
        "N=${LAYERS:-4}\n"
        "torchrun --nproc_per_node 8 train.py --num-layers $N --hidden-size 64 --context-parallel-size $N "
        "--micro-batch-size $N --global-batch-size $N --seq-length $N --tensor-model-parallel-size $N\n"
    )
    view = run_view.build(run_view.Inputs(scripts=[str(path)]))
    lines = [note for note in view.notes if "LAYERS is not set" in note]
    assert len(lines) == 1, view.notes
    assert "and 2 more)" in lines[0]  # 6 settings: the first named, 3 more shown, 2 counted
    assert lines[0].count("LAYERS is not set") == 1
