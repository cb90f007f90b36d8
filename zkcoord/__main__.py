from zkcoord.cli.main import main

main()
