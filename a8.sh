cd /work/wtb12; D=/tmp/b12/st2; rm -rf $D
A="--gin_file=configs/quickstart.gin --model_dir=$D --gin_param=train.num_steps=100000 --gin_param=mlp.hidden=(2048,2048) --gin_param=Trainer.checkpoint_every=5 --gin_param=Trainer.steps_per_loop=5"
PYTHONPATH=/work/wtb12 python3 scripts/train.py $A >$D.out 2>$D.err & p=$!
sleep 16; kill -TERM $p; sleep 0.02; kill -TERM $p; sleep 0.02; kill -INT $p; wait $p; echo "rc=$? $(grep -h 'stable_train:\|Traceback' $D.err $D.out)"
ls $D/checkpoints | tr '\n' ' '; echo; tail -3 $D/events.jsonl | cut -c1-200
PYTHONPATH=/work/wtb12 python3 scripts/train.py $A --gin_param=train.num_steps=5 >$D.out2 2>$D.err2; echo "rerun rc=$? $(grep -h 'stable_train:\|Traceback' $D.err2 $D.out2)"
