"""A LoRA fine-tuning script as people write them (Hugging Face Trainer +
peft), run by Lathe as a trainer of its own. Lathe's part is the lines
marked LATHE: the job's settings, its folders and the callback.

    # the daemon's config
    trainers:
      hf-sft: {command: ["{hf_python}", "/opt/train/hf_sft.py"]}
"""
import json

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer, set_seed

import lathe_trainer  # LATHE
from lathe_trainer.hf import LatheCallback, training_arguments  # LATHE

job = lathe_trainer.job()  # LATHE: the submitted spec
set_seed(job["training"]["seed"])  # before the LoRA weights are drawn
path = lambda uri: uri[len("file://"):] if uri.startswith("file://") else uri  # noqa: E731
tok = AutoTokenizer.from_pretrained(path(job["base_model"]))
tok.pad_token = tok.pad_token or tok.eos_token
model = AutoModelForCausalLM.from_pretrained(path(job["base_model"]), dtype=torch.float32)
lora = job["lora"]
model = get_peft_model(model, LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                                         target_modules=lora["target_modules"], task_type="CAUSAL_LM"))


def load(uri):
    with open(path(uri), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    texts = [r["text"] if "text" in r else r["prompt"] + r["completion"] for r in rows]
    ds = Dataset.from_dict({"text": texts})
    return ds.map(lambda b: tok(b["text"], truncation=True, max_length=128), batched=True, remove_columns=["text"])


train = load(job["dataset"])
evals = load(job["eval_dataset"]) if job.get("eval_dataset") else None
t = job["training"]
args = training_arguments(  # LATHE: output_dir = the checkpoint folder, resume_from_checkpoint
    max_steps=t["max_steps"] or -1, num_train_epochs=t["epochs"], per_device_train_batch_size=t["batch_size"],
    learning_rate=t["learning_rate"], save_steps=t.get("checkpoint_every") or 50, logging_steps=5,
    eval_strategy="steps" if evals else "no", eval_steps=t.get("eval_every") or 50)
trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=evals,
                  data_collator=DataCollatorForLanguageModeling(tok, mlm=False),
                  callbacks=[LatheCallback()])  # LATHE: the one line
trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
trainer.save_model(args.lathe_output_dir)  # LATHE publishes this folder's files
