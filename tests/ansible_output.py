"""What ansible-playbook printed, read back: the results of its tasks by
host, and its PLAY RECAP (the packaging test and the vcluster tests run
the roles and check their output)."""


def task_results(out, *kinds):
    """(task line, host, result line) for each line of ansible-playbook's
    output that starts with one of `kinds` ("changed", "fatal", ...), under
    the TASK [...] line it belongs to (None before the first)."""
    task = None
    for line in out.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith(tuple(f"{kind}: [" for kind in kinds)):
            yield task, line.split("[", 1)[1].split("]", 1)[0], line


def changed_tasks(out):
    """{host: [task names that changed it]} of ansible-playbook's output."""
    tasks = {}
    for task, host, _ in task_results(out, "changed"):
        if task:
            tasks.setdefault(host, []).append(task[len("TASK ["):task.index("]")])
    return tasks


def failed_tasks(out):
    """[(host, "TASK [...] and its fatal line")] of ansible-playbook's output."""
    return [(host, f"{task}\n{line[:3000]}")
            for task, host, line in task_results(out, "fatal", "failed")]


def recap(out):
    """{host: {counter: n}} of ansible-playbook's PLAY RECAP."""
    hosts = {}
    for line in out.split("PLAY RECAP", 1)[-1].splitlines():
        if ":" in line and "=" in line:
            host, counters = line.split(":", 1)
            hosts[host.strip()] = {k: int(v) for k, v in
                                   (w.split("=") for w in counters.split())}
    return hosts
