from .entry import run

if __name__ == "__main__":  # not again in a process that imports it as its parent's main (multiprocessing's spawn)
    run()
